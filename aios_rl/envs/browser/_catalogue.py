"""The word lists the browser task generator draws from: people, places, pages, product types.

Data only; :mod:`.flows` decides what to do with it. Changing a list changes the tasks generated
from it (their content addresses included), never the tasks already stored."""

from __future__ import annotations

FIRST_NAMES = (
    "Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Margaret", "Ken", "Radia", "Tim",
    "Frances", "John", "Katherine", "Dennis", "Hedy", "Linus", "Anita", "Guido", "Sophie",
    "Niklaus", "Joan", "Leslie", "Shafi", "Robin", "Mary", "Claude", "Evelyn", "Ivan",
)  # fmt: skip
LAST_NAMES = (
    "Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Hamilton", "Thompson",
    "Perlman", "Berners", "Allen", "Backus", "Johnson", "Ritchie", "Lamarr", "Torvalds", "Borg",
    "Rossum", "Wilson", "Wirth", "Clarke", "Lamport", "Goldwasser", "Milner", "Keller",
    "Shannon", "Boyd", "Sutherland",
)  # fmt: skip
EMAIL_DOMAINS = ("example.org", "example.com", "mail.example.net", "post.example.io")
WORDS = (
    "amber", "falcon", "river", "copper", "maple", "orbit", "lantern", "meadow", "cobalt",
    "harbor", "quartz", "willow", "ember", "glacier", "saffron", "thistle", "nimbus", "juniper",
)  # fmt: skip
"""Password words: ``<word>-<word>-<two digits>``."""

SITE_NAMES = (
    "Northwind", "Contoso", "Fabrikam", "Tailspin", "Wingtip", "Adatum", "Litware",
    "Proseware", "Lucerne", "Coho",
)  # fmt: skip

PROTECTED_PAGES = (
    "Reports", "Billing", "Invoices", "Team", "Settings", "Audit log", "Projects", "Payroll",
    "Contracts", "Analytics",
)  # fmt: skip
"""The pages behind the ``auth`` flow's login (link texts and headings)."""

COUNTRIES = (
    "France", "Germany", "Spain", "Italy", "Portugal", "Norway", "Japan", "Canada", "Brazil",
    "Kenya", "Ireland", "Chile",
)  # fmt: skip
POSITIONS = (
    "Data analyst", "Backend engineer", "Product designer", "Support specialist",
    "Technical writer", "Site reliability engineer",
)  # fmt: skip
SKILLS = ("Python", "SQL", "Design", "Writing", "Sales", "Linux")
TIME_SLOTS = ("09:00", "09:30", "10:00", "11:15", "13:45", "14:30", "15:00", "16:30")

STREETS = (
    "Baker Street", "Rue de Rivoli", "Elm Avenue", "Harbour Road", "Mill Lane", "Station Road",
    "Kingsway", "Oak Crescent", "Canal Walk", "Market Square",
)  # fmt: skip
CITIES = (
    "London", "Leeds", "Bristol", "Dublin", "Cardiff", "Glasgow", "Oxford", "York", "Bath",
    "Belfast",
)  # fmt: skip

TOPICS = (
    "Caching without tears", "The history of the mouse", "Why compilers are fast",
    "Designing for failure", "A tour of TCP", "Floating point surprises", "Garbage collection",
    "Reading other people's code", "Small teams, big systems", "The art of the commit message",
    "Testing in production", "Queues everywhere", "How DNS really works", "Unicode in practice",
    "Writing a shell", "Profilers and flame graphs", "Distributed consensus", "Type systems",
    "The joy of logs", "Schedulers explained", "Memory allocators", "Build systems",
    "Search engines from scratch", "Lessons from outages", "The life of a packet",
    "Interviews with maintainers", "Data formats", "Time zones", "Accessibility basics",
    "Rate limiting",
)  # fmt: skip
"""Podcast episode topics (the ``scroll`` flow's ``episodes`` template)."""

BRANDS = (
    "Alder", "Birch", "Cedar", "Dune", "Ember", "Fjord", "Glade", "Harbor", "Iris", "Juniper",
    "Kestrel", "Linden", "Maple", "Nimbus", "Orchid", "Pine", "Quartz", "Rowan", "Sable",
    "Tundra",
)  # fmt: skip

PRODUCT_TYPES: dict[str, dict[str, object]] = {
    "t-shirt": {
        "attrs": ("organic cotton", "machine washable", "slim fit", "v-neck", "long sleeve",
                  "recycled polyester"),
        "options": {"Size": ("S", "M", "L", "XL"),
                    "Colour": ("black", "white", "navy", "olive", "red")},
        "price": (9, 40),
    },
    "running shoes": {
        "attrs": ("waterproof", "lightweight", "wide fit", "vegan", "reflective"),
        "options": {"Size": ("39", "40", "41", "42", "43", "44", "45"),
                    "Colour": ("black", "grey", "blue", "white")},
        "price": (40, 160),
    },
    "backpack": {
        "attrs": ("waterproof", "laptop sleeve", "anti-theft", "recycled fabric", "lightweight"),
        "options": {"Capacity": ("20 L", "30 L", "40 L"), "Colour": ("black", "green", "grey")},
        "price": (25, 120),
    },
    "headphones": {
        "attrs": ("wireless", "noise cancelling", "foldable", "built-in microphone",
                  "long battery life"),
        "options": {"Colour": ("black", "white", "silver")},
        "price": (20, 300),
    },
    "coffee mug": {
        "attrs": ("dishwasher safe", "insulated", "microwave safe", "handmade", "stoneware"),
        "options": {"Capacity": ("250 ml", "350 ml", "450 ml"),
                    "Colour": ("white", "blue", "speckled")},
        "price": (6, 30),
    },
    "desk lamp": {
        "attrs": ("dimmable", "usb charging", "energy saving", "clamp mount", "adjustable arm"),
        "options": {"Colour": ("black", "white", "brass")},
        "price": (15, 90),
    },
    "rain jacket": {
        "attrs": ("waterproof", "breathable", "packable", "hooded", "recycled fabric"),
        "options": {"Size": ("S", "M", "L", "XL"), "Colour": ("yellow", "navy", "black", "red")},
        "price": (30, 180),
    },
}  # fmt: skip
"""Product type -> its attributes, its option dimensions (values never shared between two
dimensions of one type, so a radio's label names it), and its price range in dollars."""
