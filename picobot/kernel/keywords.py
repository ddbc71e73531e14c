"""Keywords for recall: the few words of a message worth searching for.

:func:`extract_terms` is deliberately simple (no stemming: the index's Porter
tokenizer folds "pizzas" and "pizza" on both sides). :func:`fts_query` lives with the
index in :mod:`picobot.store.search`, because the store must not import the kernel
and the column names are the store's; it is re-exported here for the kernel's use.
"""

from __future__ import annotations

from picobot.store.search import fts_query
from picobot.store.terms import words

__all__ = ["STOP_WORDS", "extract_terms", "fts_query"]

MAX_TERM_CHARS = 40
"""Longer "words" are pasted hashes, keys or base64: they would outrank real words."""


_STOP_WORDS_TEXT = """
    a about above after again against all also am an and any are aren as at be because
    been before being below between both but by can cannot could couldn did didn do does
    doesn doing don down during each else even ever every few for from further get gets
    got had hadn has hasn have haven having he her here hers herself him himself his how
    however if in into is isn it its itself just let ll me might more most much must my
    myself no nor not now of off on once only or other ought our ours ourselves out over
    own re same shall she should shouldn so some such than that the their theirs them
    themselves then there these they this those though through to too under until up
    upon us ve very was wasn we were weren what when where which while who whom whose why
    will with won would wouldn yet you your yours yourself yourselves
    hi hello hey ok okay yes yeah yep nope please pls thanks thank thx ty sure cool great
    nice well oh ah um uh hmm lol like really actually maybe remember recall tell told
    say said know think want need make thing things something anything one two
"""
STOP_WORDS: frozenset[str] = frozenset(_STOP_WORDS_TEXT.split())
"""Common English words and chat filler that would match almost every message."""


def extract_terms(text: str, max_terms: int = 8) -> list[str]:
    """The distinctive words of ``text``, longest first, at most ``max_terms``.

    Lowercased words of two or more letters or digits, without stop words and
    duplicates. Length stands in for rarity: long words are the specific ones
    (names, places, topics); ties keep their order in the text.
    """
    if max_terms <= 0:
        return []
    seen: dict[str, None] = {}
    for word in words(text.lower()):
        if 2 <= len(word) <= MAX_TERM_CHARS and word not in STOP_WORDS:
            seen.setdefault(word)
    # sorted() is stable, so equal lengths stay in first-appearance order.
    return sorted(seen, key=len, reverse=True)[:max_terms]
