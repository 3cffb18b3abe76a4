"""``sites``: the local web application browser episodes run against (auth, form, scroll, shop
and combo flows), one server-side session per episode, judged over NATS, never by the page."""

__version__ = "0.1.0"
