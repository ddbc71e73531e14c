"""Token estimates behind one small interface.

A provider with a real tokenizer (the local model) counts exactly, through
:class:`ProviderTokenEstimator`. For the others (remote models) the default is
:class:`ScriptTokenEstimator`, a conservative estimate across scripts: ``chars / 4``
undercounts everything but English prose (Chinese 7 estimated against 48 real tokens,
Russian 21 against 64, code 17 against 27, with SmolLM2's byte-level BPE).
"""

from __future__ import annotations

import functools
import math
import operator
import re
import string
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, Protocol, TypeVar

from picobot.llm.base import ChatMessage, LLMProvider
from picobot.store.retrieval.terms import STOP_WORDS

T = TypeVar("T")

# Role markers and separators that chat templates add around each message.
MESSAGE_OVERHEAD_TOKENS = 4

TRUNCATED = " [... truncated]"
"""The visible marker at the end of a text cut to fit (:func:`truncate_to_tokens`)."""


class TokenEstimator(Protocol):
    """Estimates how many tokens a text costs."""

    def estimate(self, text: str) -> int:
        """Token count of ``text`` (an estimate; never negative)."""
        ...


class CharTokenEstimator:
    """ceil(len(text) / chars_per_token)."""

    def __init__(self, chars_per_token: int = 4) -> None:
        self._cpt = chars_per_token

    def estimate(self, text: str) -> int:
        """Characters divided by the ratio, rounded up."""
        return math.ceil(len(text) / self._cpt)


# Each ASCII character as its class: lower, upper, digit, punctuation, space, line break
# (a bytes table: bytes.translate and bytes.count are several times faster than str's).
_CLASSES = bytes.maketrans(
    (
        string.ascii_lowercase
        + string.ascii_uppercase
        + string.digits
        + string.punctuation
        + " \n\r\t\v\f"
    ).encode(),
    ("a" * 26 + "A" * 26 + "d" * 10 + "p" * len(string.punctuation) + "s" + "n" * 5).encode(),
)
# Tokens per character of each class, and per class pair (a boundary inside a "word":
# camelCase, base64, hex, runs of spaces), fitted to SmolLM2's byte-level BPE. English
# words are mostly whole tokens; other languages' words in Latin letters split into
# pieces, hence the two weights for lower-case letters.
_WEIGHTS = {b"A": 0.45, b"d": 1.0, b"p": 0.9, b"n": 1.0}
_PAIRS = {b"aA": 1.0, b"ad": 0.35, b"da": 0.35, b"Ad": 0.35, b"dA": 0.35, b"ss": 0.3}
_LOWER_ENGLISH, _LOWER_OTHER = 0.25, 0.45
_ENGLISH_SHARE = 0.2
"""Text whose words of three letters or more are at least this share English function
words is English (shorter words, such as "a", "ok", "ve", are shared by many languages)."""
_LATIN_LETTERS = bytes(c if 0x61 <= c <= 0x7A else 0x20 for c in range(256))
"""Keeps ``a-z``, blanks everything else: the Latin words are what ``split()`` leaves."""
_STOP_WORDS_ASCII = frozenset(w.encode() for w in STOP_WORDS if w.isascii())
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


@functools.lru_cache(maxsize=4096)
def _char_cost(ch: str) -> float:
    """Tokens of one non-ASCII character: by script, at most its UTF-8 byte count."""
    code = ord(ch)
    if code < 0x250:  # accented Latin
        return 1.6
    if code < 0x800:  # Greek, Cyrillic, Armenian, Hebrew, Arabic
        return 1.3
    if 0xAC00 <= code <= 0xD7AF or 0x1E00 <= code <= 0x1EFF:  # Hangul; Vietnamese
        return 3.0
    if code < 0x10000:  # CJK, Indic, Thai, symbols
        return 2.2
    return 3.0  # emoji and other astral characters: a token a byte


class ScriptTokenEstimator:
    """A conservative estimate for any script, without a tokenizer.

    Per character class (ASCII letters, digits, punctuation, line breaks, each
    non-ASCII script) plus the class changes inside words, fitted to SmolLM2's
    byte-level BPE, so it undercounts that tokenizer by at most 10% on the committed
    multilingual corpus (tests/text/test_token_estimate.py) and overcounts English by
    about 5% in dialogue and 20% in prose. Modern remote tokenizers (GPT-4o, Claude, Llama 3) spend
    fewer tokens than SmolLM2 on most scripts, so they are overcounted more: the
    budget errs on the safe side. Results are cached per text (a window's messages
    are estimated again every turn).
    """

    def estimate(self, text: str) -> int:
        """Estimated tokens of ``text`` (0 for empty text)."""
        return _script_estimate(text)

    def estimate_lines(self, lines: Sequence[str]) -> int:
        """``estimate("\\n".join(lines))``, from each line's cached counts when all are
        ASCII (no class pair or word spans a line break, so the counts add up)."""
        if not all(map(str.isascii, lines)):
            return _script_estimate("\n".join(lines))
        counts = [sum(column) for column in zip(*map(_ascii_counts, lines), strict=True)]
        if not counts:
            return 0
        counts[_NEWLINES] += len(lines) - 1
        return math.ceil(_ascii_total(counts))


class _ByHash(Generic[T]):
    """``compute(text)`` cached by the hash of the text: no text is kept, so it can hold
    more results than a cache keyed by the texts (at 1M messages a recall's records
    outnumbered 16,384 of them). Two texts of one 64-bit hash among ``kept`` would
    share a result: about one chance in 10^10 when full. When full it starts again (a
    clear is atomic, so threads computing at once need no lock)."""

    def __init__(self, compute: Callable[[str], T], kept: int) -> None:
        self._compute = compute
        self._kept = kept
        self._known: dict[int, T] = {}

    def __call__(self, text: str) -> T:
        key = hash(text)
        known = self._known.get(key)
        if known is not None:
            return known
        if len(self._known) >= self._kept:
            self._known.clear()
        self._known[key] = result = self._compute(text)
        return result

    def __len__(self) -> int:
        return len(self._known)

    def clear(self) -> None:
        """Forget every result."""
        self._known.clear()


CACHED_TEXTS = 65_536
"""Texts whose estimate, and whose character counts, are kept: about 6 and 15 MB."""

Counts = tuple[int, ...]
"""Of an ASCII text: each of :data:`_WEIGHTS`' classes, each of :data:`_PAIRS`, lower-case
letters, Latin words (:func:`_ascii_counts`) and English function words among them."""
_NEWLINES = list(_WEIGHTS).index(b"n")
_COUNTED = (*_WEIGHTS, *_PAIRS, b"a")
"""The class strings counted in each text, in :data:`Counts`' order."""
_CLASS_WEIGHTS = (*_WEIGHTS.values(), *_PAIRS.values())


def _count(ascii_text: str) -> Counts:
    # Every recalled line is estimated on a turn (hundreds at 1M messages): bound methods
    # mapped over tuples, no generator in the way.
    raw = ascii_text.encode("ascii")
    # Runs of three letters a-z or more, case folded (the prompt estimates thousands of
    # words a turn: a regex and a generator over them cost more than this).
    found = [w for w in raw.lower().translate(_LATIN_LETTERS).split() if len(w) > 2]
    return (
        *map(raw.translate(_CLASSES).count, _COUNTED),
        len(found),
        sum(map(_STOP_WORDS_ASCII.__contains__, found)),
    )


def _ascii_total(counts: Sequence[int]) -> float:
    """The estimate of an ASCII text from its :data:`Counts`, before rounding up."""
    total: float = sum(map(operator.mul, _CLASS_WEIGHTS, counts))
    lower, found, english_words = counts[len(_CLASS_WEIGHTS) :]
    if lower:
        english = english_words >= _ENGLISH_SHARE * found
        total += lower * (_LOWER_ENGLISH if english else _LOWER_OTHER)
    return total


def _estimate(text: str) -> int:
    if not text:
        return 0
    ascii_text = text if text.isascii() else _NON_ASCII.sub("", text)
    total = _ascii_total(_ascii_counts(ascii_text))
    if len(ascii_text) != len(text):
        total += sum(map(_char_cost, _NON_ASCII.findall(text)))
    return math.ceil(total)


_ascii_counts = _ByHash(_count, CACHED_TEXTS)
_script_estimate = _ByHash(_estimate, CACHED_TEXTS)


def forget_texts() -> None:
    """Empty the estimate caches: a purge or a deletion calls this, so nothing worked
    out from a deleted text stays in this process's memory."""
    _script_estimate.clear()
    _ascii_counts.clear()


def estimate_lines(estimator: TokenEstimator, lines: Sequence[str]) -> int:
    """``estimator.estimate("\\n".join(lines))``, without the join where the estimator
    can add up its lines' estimates (a prompt block re-rendered every turn whose lines
    were mostly estimated before)."""
    joined = getattr(estimator, "estimate_lines", None)
    if joined is not None:
        return int(joined(lines))
    return estimator.estimate("\n".join(lines))


class ProviderTokenEstimator:
    """The provider's tokenizer when it has one, else the character estimate."""

    def __init__(self, provider: LLMProvider, fallback: TokenEstimator | None = None) -> None:
        self._provider = provider
        self._fallback = fallback or ScriptTokenEstimator()

    def estimate(self, text: str) -> int:
        """Exact count from the model when available."""
        exact = self._provider.count_tokens(text)
        return exact if exact is not None else self._fallback.estimate(text)

    def estimate_lines(self, lines: Sequence[str]) -> int:
        """``estimate("\\n".join(lines))`` (the fallback's sum of lines when it has one)."""
        exact = self._provider.count_tokens("\n".join(lines))
        return exact if exact is not None else estimate_lines(self._fallback, lines)


def message_cost(estimator: TokenEstimator, text: str) -> int:
    """Tokens a message costs in a prompt, framing included."""
    return estimator.estimate(text) + MESSAGE_OVERHEAD_TOKENS


def prompt_cost(estimator: TokenEstimator, messages: Iterable[ChatMessage]) -> int:
    """Tokens a prompt costs: every message with its framing, tool calls' names and
    arguments included."""
    return sum(
        message_cost(estimator, m.content)
        + sum(estimator.estimate(c.name + c.arguments) for c in m.tool_calls)
        for m in messages
    )


def truncate_to_tokens(estimator: TokenEstimator, text: str, max_tokens: int) -> str:
    """Cut ``text`` so it fits ``max_tokens``, with a visible marker when cut."""
    if estimator.estimate(text) <= max_tokens:
        return text
    marker = TRUNCATED
    room = max(0, max_tokens - estimator.estimate(marker))
    cut = _longest_prefix(estimator, text, room)
    # Estimates are not additive (each rounds up): the joined text may count one more.
    while cut > 0 and estimator.estimate(text[:cut] + marker) > max_tokens:
        cut -= 1
    return text[:cut] + marker


def _longest_prefix(estimator: TokenEstimator, text: str, room: int) -> int:
    """The length of the longest prefix of ``text`` estimated at most ``room`` tokens.

    Tokenizers are not linear in characters, but nearly: the search starts at the
    proportional guess and gallops outwards to a bracket, then bisects it, so a cut
    costs a few estimates instead of one per halving of the whole text (the same
    answer as a plain bisection whenever longer prefixes never count fewer tokens).
    """

    def fits(n: int) -> bool:
        return estimator.estimate(text[:n]) <= room

    n = len(text)
    whole = max(1, estimator.estimate(text))
    guess = min(n, n * room // whole)
    step = max(8, n // 32)
    if fits(guess):
        lo, hi = guess, n  # lo fits; the answer is in [lo, hi]
        while lo + step < hi and fits(lo + step):
            lo, step = lo + step, step * 2
        hi = min(hi, lo + step)
    else:
        lo, hi = 0, guess - 1
        while hi - step > 0 and not fits(hi - step):
            hi, step = hi - step, step * 2
        lo = max(0, hi - step)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo
