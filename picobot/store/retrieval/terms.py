"""Per-user index terms: how the recall index stores a text (see picobot.store.retrieval.search).

Every word of a user's text is indexed with a short prefix derived from the user, so
each FTS5 term (and its doclist) belongs to one user. Kept apart from the search module
so the database layer can install :func:`index_text` on each connection it opens.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
import threading
import unicodedata
from collections.abc import Sequence

import snowballstemmer  # type: ignore[import-untyped]

# A word as FTS5's unicode61 tokenizer sees one: letters or digits plus the combining
# marks it keeps inside a token (Indic vowel signs and viramas, Hebrew and Arabic
# points, stray Latin diacritics), which Python's \w alone would cut at.
_MARKS = (
    "\u0300-\u036f\u0483-\u0489\u0591-\u05bd\u05bf-\u05c7\u0610-\u061a\u064b-\u065f"
    "\u0670\u06d6-\u06ed\u0900-\u0903\u093a-\u094f\u0951-\u0957\u0962\u0963"
    "\u0981-\u0983\u09bc-\u09d7\u0a01-\u0a03\u0a3c-\u0a51\u0a81-\u0a83\u0abc-\u0acd"
    "\u0b01-\u0b03\u0b3c-\u0b57\u0b82\u0bbe-\u0bd7\u0c00-\u0c04\u0c3e-\u0c56"
    "\u0c81-\u0c83\u0cbc-\u0cd6\u0d00-\u0d03\u0d3b-\u0d57\u0e31\u0e34-\u0e3a"
    "\u0e47-\u0e4e\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20f0\ufe20-\ufe2f"
)
WORD = re.compile(rf"(?:[^\W_]|[{_MARKS}])+")
"""One word of text, for the index (:func:`index_text`) and for keywords alike."""

# WORD as one character class, which the regex engine runs about twice as fast as the
# alternation: it would also take '_', so words() replaces that first.
_WORD_CLASS = re.compile(rf"[\w{_MARKS}]+")


# Scripts written without spaces between words (Han, kana, Hangul syllables, Thai):
# each character is a word of its own, and a query term of several is matched as a
# phrase (consecutive characters), so any part of a run can be found.
_UNSPACED = "\u0e00-\u0e7f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
UNSPACED_CHAR = re.compile(f"[{_UNSPACED}]")
UNSPACED_GLOB = f"*[{_UNSPACED}]*"
"""An SQL GLOB pattern matching text that holds a character of an unspaced script."""
_UNSPACED_SPLIT = re.compile(f"[{_UNSPACED}]|[^{_UNSPACED}]+")


def words(text: str) -> list[str]:
    """``WORD.findall(text)``, in half the time (the index and keywords split every text).

    A character of an unspaced script (:data:`UNSPACED_CHAR`) is a word by itself.
    """
    found: list[str] = _WORD_CLASS.findall(text.replace("_", " "))
    if text.isascii() or not UNSPACED_CHAR.search(text):
        return found
    return [part for word in found for part in _UNSPACED_SPLIT.findall(word)]


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


def has_content(text: str) -> bool:
    """Whether ``text`` has a word worth searching for (not only stop words and filler).

    Recall skips messages without one ("ok", "thanks!") when it adds context around a
    hit: they cost tokens and answer nothing.
    """
    # The words of :func:`words`, found one at a time: the first with content answers
    # (recall asks this of every message around its matches, most of which have one).
    # A word holding a character of an unspaced script has that character as a word.
    for match in _WORD_CLASS.finditer(text.lower().replace("_", " ")):
        w = match.group()
        if (len(w) > 1 and w not in STOP_WORDS) or (not w.isascii() and UNSPACED_CHAR.search(w)):
            return True
    return False


INDEX_TEXT_FUNCTION = "picobot_index_text"
"""The SQL name of :func:`index_text`, used by the index triggers."""


@functools.lru_cache(maxsize=8192)
def term_prefix(user_id: str) -> str:
    """The six decimal digits that start every indexed word of ``user_id``.

    Digits only: the Porter stemmer counts a word's vowel-consonant sequences, and a
    leading run of digits (consonants to it) leaves that count, and so the stem, as it
    is for the bare word; hex letters such as 'a' or 'e' would stem some words of some
    users differently. A million buckets: users may share one, which only shares
    doclists (the owner token keeps results apart).
    """
    digest = hashlib.sha256(user_id.encode("utf-8", "surrogatepass")).digest()
    return f"{int.from_bytes(digest[:4], 'big') % 1_000_000:06d}"


_PORTER = snowballstemmer.stemmer("porter")
_STEM_LOCK = threading.Lock()


STEM_MAX_CHARS = 64
"""Longer words are folded but not stemmed (as FTS5's porter tokenizer leaves tokens
over 64 bytes): stemming is not linear in a word's length, and a message may hold one
word of a megabyte."""


def stem(word: str) -> str:
    """``word`` folded and stemmed as SQLite's ``porter unicode61 remove_diacritics 2``
    tokenizer would: lower case, no diacritics, Porter's stem."""
    if len(word) > STEM_MAX_CHARS:
        return _fold(word)
    return _stem_short(word)


def _fold(word: str) -> str:
    return "".join(
        c for c in unicodedata.normalize("NFKD", word.lower()) if not unicodedata.combining(c)
    )


@functools.lru_cache(maxsize=65_536)
def _stem_short(word: str) -> str:
    folded = _fold(word)
    with _STEM_LOCK:  # the stemmer object keeps state between calls
        return str(_PORTER.stemWord(folded))


def forget_words() -> None:
    """Empty the stem cache, keyed by the words of indexed and searched texts (called
    with :func:`picobot.text.tokens.forget_texts` after a deletion)."""
    _stem_short.cache_clear()


def keyed_word(terms_key: bytes, word: str) -> str:
    """``word``'s index term under a user's term key: 15 digits of an HMAC of its stem.

    Digits only, so the tokenizer neither splits nor stems it; without the key, the
    term says nothing about the word.
    """
    digest = hmac.digest(terms_key, stem(word).encode("utf-8", "surrogatepass"), "sha256")
    return f"{int.from_bytes(digest[:8], 'big') % 10**15:015d}"


def user_terms(user_id: str, found: list[str], terms_key: bytes | None) -> list[str]:
    """The index terms of ``found`` words of ``user_id``: prefixed, and keyed if a key is given."""
    prefix = term_prefix(user_id)
    if terms_key is None:
        return [prefix + w for w in found]
    return [prefix + keyed_word(terms_key, w) for w in found]


def index_text(user_id: str | None, text: str | None, terms_key: bytes | None = None) -> str | None:
    """``text`` as the index stores it: its words as the owner's terms (:func:`user_terms`).

    Punctuation and spacing are dropped (the tokenizer would drop them too); without a
    key, case and diacritics are left to the tokenizer, which folds them the same way
    for queries. Never raises: a trigger calling it must not fail a write.
    """
    if text is None:
        return None
    return " ".join(user_terms(user_id or "", words(text), terms_key))


MAX_QUERY_TERMS = 64
"""Most OR terms one query may carry; bounds the work of a hostile caller."""


def user_token(user_id: str) -> str:
    """The single FTS token that marks ``user_id``'s rows in the index.

    ``'u' + hex(utf-8) + 'x'``: the triggers compute the same with core SQL
    (``'u' || lower(hex(user_id)) || 'x'``). Hex is alphanumeric (one token) and
    injective (no two users share one).
    """
    return "u" + user_id.encode("utf-8").hex() + "x"


def body_query(user_id: str, terms: Sequence[str], terms_key: bytes | None = None) -> str:
    """A MATCH expression: rows in ``user_id``'s prefix bucket containing any of ``terms``.

    Not scoped by itself (users may share a prefix): :func:`fts_query` adds the owner.
    Each term becomes one quoted phrase of its words as the user's terms (keyed with
    ``terms_key`` when given, see :func:`user_terms`), so nothing in user text
    (``NEAR(``, ``OR``, ``col:``, ``*``, ``^``, quotes, parentheses, NUL) is ever
    parsed as FTS5 syntax: only letters, digits and marks reach the expression. Terms
    without a word are skipped; raises ValueError when none is left.
    """
    phrases = ['"' + " ".join(p) + '"' for p in query_phrases(user_id, terms, terms_key)]
    if not phrases:
        raise ValueError("a recall query needs at least one term with a word in it")
    # body: keeps terms off the owner column.
    return f"body:({' OR '.join(phrases)})"


def query_phrases(
    user_id: str, terms: Sequence[str], terms_key: bytes | None = None
) -> list[list[str]]:
    """The phrases a query of ``terms`` matches, each the index terms of one term's
    words in order (:func:`user_terms`); terms without a word are skipped.

    What :func:`body_query` quotes for FTS5, and what PostgreSQL's ranking
    (:mod:`picobot.store.postgres.search`) looks up: one list, so both engines match
    the same phrases.
    """
    phrases = []
    for term in terms[:MAX_QUERY_TERMS]:
        found = words(term)
        if found:
            phrases.append(user_terms(user_id, found, terms_key))
    return phrases


def fts_query(user_id: str, terms: Sequence[str], terms_key: bytes | None = None) -> str:
    """A MATCH expression scoped by itself: rows of ``user_id`` with any of ``terms``.

    What :func:`search_sql` matches. The owner phrase adds nothing to the score (its
    column weighs 0 in the bm25 call).
    """
    return f'owner:"{user_token(user_id)}" AND {body_query(user_id, terms, terms_key)}'
