"""How a variant fills each family's template: one function per family, named after it.

Each takes ``(rng, variant)`` and returns the value of every ``__tpl_<name>__`` marker in the
family's ``module.py`` and ``test_module.py``, ``module`` (the module's name) included. Names
cycle with the variant (:func:`_pick`); constants are drawn from ``rng``, which
:func:`~aios_rl.envs.shell.families.render` seeds from ``(family, variant)`` only. Changing a
pool or the order of the draws changes the rendered files, and so every task id made from them.
"""

from __future__ import annotations

import random


def _pick(pool: list[str], variant: int) -> str:
    return pool[variant % len(pool)]


def stack(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["stack", "lifo", "pile", "plate_stack"], v),
        "cls": _pick(["Stack", "LifoStack", "Pile", "PlateStack"], v),
        "push": _pick(["push", "push", "put", "add"], v),
        "pop": _pick(["pop", "pop", "take", "remove_top"], v),
        "pop_many": _pick(["pop_many", "pop_n", "take_many", "drop_many"], v),
        "cap": rng.randint(6, 12),
        "topn": rng.choice([2, 3, 4]),
    }


def ring_queue(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["ring_queue", "fifo", "circular", "ringbuffer"], v),
        "cls": _pick(["RingQueue", "Fifo", "CircularQueue", "RingBuffer"], v),
        "put": _pick(["put", "enqueue", "push", "append"], v),
        "get": _pick(["get", "dequeue", "shift", "popleft"], v),
        "size": rng.randint(5, 16),
        "steps": rng.choice([1, 2, 3]),
    }


def interval(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["interval", "ranges", "span_math", "intervals"], v),
        "cls": _pick(["Interval", "Range", "Span", "Segment"], v),
        "merge": _pick(["merge", "merge_all", "coalesce", "union_all"], v),
        "margin": rng.randint(1, 5),
    }


def text_wrap(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["wrapping", "textfill", "linebreak", "paragraphs"], v),
        "wrap": _pick(["wrap", "wrap_text", "break_lines", "wrap_words"], v),
        "truncate": _pick(["truncate", "shorten", "clip", "ellipsize"], v),
        "width": rng.choice([12, 16, 20, 24, 30]),
        "suffix": _pick(["...", "~", "..", "+"], v),
        "prefix": rng.choice(["  ", "    ", "> ", "| "]),
    }


def run_length(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["rle", "runlength", "squash", "run_codec"], v),
        "encode": _pick(["encode", "compress", "pack", "rle_encode"], v),
        "decode": _pick(["decode", "expand", "unpack", "rle_decode"], v),
        "maxrun": rng.choice([9, 12, 15, 20, 99]),
    }


def matrix(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["matrix", "linalg_lite", "grids", "matops"], v),
        "multiply": _pick(["multiply", "matmul", "dot", "product"], v),
        "power": _pick(["power", "matpow", "mpow", "repeat_product"], v),
        "det": _pick(["determinant", "det", "determinant_of", "det_laplace"], v),
        "factor": rng.choice([2, 3, 5, 10]),
    }


def date_math(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["datemath", "calendar_math", "daycount", "dates"], v),
        "day_of_year": _pick(["day_of_year", "yearday", "ordinal_in_year", "doy"], v),
        "add_days": _pick(["add_days", "shift", "plus_days", "advance"], v),
        "weekstart": _pick(["0", "6", "6", "0"], v),
        "months": rng.choice([1, 2, 3, 6]),
    }


def bank_account(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["bank", "ledger_account", "wallet", "checking"], v),
        "cls": _pick(["Account", "LedgerAccount", "Wallet", "CheckingAccount"], v),
        "deposit": _pick(["deposit", "credit", "pay_in", "deposit"], v),
        "withdraw": _pick(["withdraw", "debit", "pay_out", "take_out"], v),
        "overdraft": rng.choice([0, 100, 250, 500]),
        "fee": rng.choice([1, 2, 3, 5]),
        "rate": rng.choice([2, 3, 4, 7]),
        "last": rng.choice([3, 4, 5]),
    }


def inventory(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["inventory", "stockroom", "warehouse", "pantry"], v),
        "cls": _pick(["Inventory", "Stockroom", "Warehouse", "Pantry"], v),
        "add": _pick(["add", "receive", "stock", "put"], v),
        "remove": _pick(["remove", "ship", "take", "consume"], v),
        "reorder": rng.choice([3, 5, 10]),
        "top": rng.choice([1, 2, 3]),
    }


def roman(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["roman", "numerals", "roman_numerals", "latin_numbers"], v),
        "to_roman": _pick(["to_roman", "encode", "int_to_roman", "roman_of"], v),
        "from_roman": _pick(["from_roman", "decode", "roman_to_int", "value_of"], v),
        "maxvalue": rng.choice([3999, 3999, 3900, 3950]),
        "lower": _pick(["False", "True", "False", "True"], v),
    }


def binary_search(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["bsearch", "bisection", "sorted_search", "halving"], v),
        "left": _pick(["bisect_left", "lower_bound", "left_index", "first_not_less"], v),
        "right": _pick(["bisect_right", "upper_bound", "right_index", "first_greater"], v),
        "index_of": _pick(["index_of", "find", "search", "locate"], v),
        "default": rng.choice([-1, 0, 42]),
    }


def tokenizer(rng: random.Random, v: int) -> dict[str, object]:
    keywords = rng.sample(["let", "if", "else", "fn", "return", "while", "and", "or", "not"], 4)
    return {
        "module": _pick(["tokenizer", "lexer", "scanner", "tokens"], v),
        "tokenize": _pick(["tokenize", "lex", "scan", "split_tokens"], v),
        "untokenize": _pick(["untokenize", "join_tokens", "render", "unlex"], v),
        "keywords": repr(sorted(keywords)),
        "comment": _pick(["#", ";", "#", "%"], v),
        "quote": _pick(['"', '"', "`", '"'], v),
        "countkind": rng.choice(["name", "op"]),
    }


def scheduler(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["scheduler", "job_queue", "dispatcher", "triage"], v),
        "cls": _pick(["Scheduler", "JobQueue", "Dispatcher", "Triage"], v),
        "submit": _pick(["submit", "enqueue", "schedule", "add_job"], v),
        "next": _pick(["next", "pop_next", "dispatch", "take"], v),
        "prio": rng.choice([3, 5, 10]),
        "boost": rng.choice([1, 2, 4]),
    }


def lru_cache(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["lru", "lru_cache", "recent", "memo_cache"], v),
        "cls": _pick(["LRUCache", "Cache", "RecentCache", "MemoCache"], v),
        "get": _pick(["get", "lookup", "fetch", "get"], v),
        "put": _pick(["put", "store", "insert", "set"], v),
        "cap": rng.choice([16, 32, 64, 128]),
    }


def statistics(rng: random.Random, v: int) -> dict[str, object]:
    return {
        "module": _pick(["stats", "describe", "summary_stats", "num_summary"], v),
        "median": _pick(["median", "middle", "median_of", "med"], v),
        "variance": _pick(["variance", "var", "spread", "variance_of"], v),
        "zscores": _pick(["zscores", "standardize", "normalize", "z_scores"], v),
        "sample": _pick(["True", "False", "False", "True"], v),
        "window": rng.choice([2, 3, 4]),
    }


def word_freq(rng: random.Random, v: int) -> dict[str, object]:
    stop = ["the", "and", "a", "an", "of", "to", "in"]
    return {
        "module": _pick(["wordfreq", "textstats", "concordance", "wordcount"], v),
        "normalize": _pick(["normalize", "clean", "canonical", "fold"], v),
        "count": _pick(["count_words", "frequencies", "tally", "word_counts"], v),
        "stopwords": repr(sorted(stop[: rng.randint(3, 7)])),
        "minlen": rng.choice([1, 2, 3]),
        "topn": rng.choice([3, 5]),
    }
