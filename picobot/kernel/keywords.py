"""Keywords for recall: the few words of a message worth searching for.

:func:`extract_terms` is deliberately simple (no stemming: the index's Porter
tokenizer folds "pizzas" and "pizza" on both sides). :func:`fts_query` lives with the
index in :mod:`picobot.store.search`, because the store must not import the kernel
and the column names are the store's; it is re-exported here for the kernel's use.
"""

from __future__ import annotations

import re

from picobot.store.search import fts_query

__all__ = ["STOP_WORDS", "extract_terms", "fts_query"]

MAX_TERM_CHARS = 40
"""Longer "words" are pasted hashes, keys or base64: they would outrank real words."""

# A word: letters or digits, plus the combining marks that Python's \w leaves out but
# FTS5's unicode61 tokenizer keeps inside a token (Indic vowel signs and viramas,
# Hebrew and Arabic points, stray Latin diacritics). Without them "नमस्ते" would be
# cut into pieces that match nothing in the index.
_MARKS = (
    "\u0300-\u036f\u0483-\u0489\u0591-\u05bd\u05bf-\u05c7\u0610-\u061a\u064b-\u065f"
    "\u0670\u06d6-\u06ed\u0900-\u0903\u093a-\u094f\u0951-\u0957\u0962\u0963"
    "\u0981-\u0983\u09bc-\u09d7\u0a01-\u0a03\u0a3c-\u0a51\u0a81-\u0a83\u0abc-\u0acd"
    "\u0b01-\u0b03\u0b3c-\u0b57\u0b82\u0bbe-\u0bd7\u0c00-\u0c04\u0c3e-\u0c56"
    "\u0c81-\u0c83\u0cbc-\u0cd6\u0d00-\u0d03\u0d3b-\u0d57\u0e31\u0e34-\u0e3a"
    "\u0e47-\u0e4e\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20f0\ufe20-\ufe2f"
)
_WORD = re.compile(rf"(?:[^\W_]|[{_MARKS}])+")

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
    for match in _WORD.finditer(text.lower()):
        word = match.group()
        if 2 <= len(word) <= MAX_TERM_CHARS and word not in STOP_WORDS:
            seen.setdefault(word)
    # sorted() is stable, so equal lengths stay in first-appearance order.
    return sorted(seen, key=len, reverse=True)[:max_terms]
