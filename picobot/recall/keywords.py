"""Keywords for recall: the few words of a message worth searching for.

:func:`extract_terms` is deliberately simple (no stemming: the index's Porter
tokenizer folds "pizzas" and "pizza" on both sides). :func:`fts_query` lives with the
index in :mod:`picobot.store.retrieval.search`, because the store must not import the kernel
and the column names are the store's; it is re-exported here for the kernel's use.
"""

from __future__ import annotations

from picobot.store.retrieval.search import fts_query
from picobot.store.retrieval.terms import STOP_WORDS, UNSPACED_CHAR, words

__all__ = ["STOP_WORDS", "extract_terms", "fts_query"]

MAX_TERM_CHARS = 40
"""Longer "words" are pasted hashes, keys or base64: they would outrank real words."""


def extract_terms(text: str, max_terms: int = 8) -> list[str]:
    """The distinctive words of ``text``, longest first, at most ``max_terms``.

    Lowercased words of two or more letters or digits, without stop words and
    duplicates. Length stands in for rarity: long words are the specific ones
    (names, places, topics); ties keep their order in the text. In scripts written
    without spaces (Chinese, Japanese, Korean, Thai) every pair of neighbouring
    characters is a term, searched as a phrase.
    """
    if max_terms <= 0:
        return []
    seen: dict[str, None] = {}
    previous = ""
    for word in words(text.lower()):
        if UNSPACED_CHAR.match(word):
            if previous:
                seen.setdefault(previous + word)
            previous = word
            continue
        previous = ""
        if 2 <= len(word) <= MAX_TERM_CHARS and word not in STOP_WORDS:
            seen.setdefault(word)
    # sorted() is stable, so equal lengths stay in first-appearance order.
    return sorted(seen, key=len, reverse=True)[:max_terms]
