"""Stop a streamed reply that has fallen into a repetition loop, and trim the loop.

Small local models (the bundled SmolLM2-135M above all) sometimes repeat one phrase
until ``max_tokens``. :class:`RepetitionGuard` sits between the model's token stream
and the user: it passes text through, holding back a short tail, and when the end of
the text has become the same run of words repeated (see :func:`find_loop`) it reports
the loop and gives back the text with the repeated copies cut, so the reply ends after
the first copy. Sans-I/O: it only sees strings, which keeps it testable on crafted text.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

MIN_LOOP_WORDS = 16
"""Fewest words a loop spans: short legitimate repeats ("no no no", "ha ha ha") pass."""
MIN_COPIES = 3
"""Copies of a short unit (under :data:`LONG_UNIT_WORDS` words) that make a loop."""
LONG_UNIT_WORDS = 10
"""From this many words, a unit said twice in a row is already a loop."""
CODE_MIN_UNIT_WORDS = 4
"""Inside a code block, shorter units never make a loop: code repeats tokens legitimately."""
CODE_MIN_LOOP_WORDS = 32
"""Fewest words a loop inside a code block spans."""
CODE_LONG_UNIT_WORDS = 16
"""From this many words, a unit said twice in a row inside a code block is a loop."""
MAX_UNIT_WORDS = 80
"""Longest unit looked for (a paragraph); longer repeats end at ``max_tokens``."""
MIN_LOOP_CHARS = 160
"""Fewest characters of a loop in text without spaces ("!!!!...", CJK)."""
MAX_PERIOD_CHARS = 40
"""Longest unit, in characters, of such a loop."""
HOLDBACK_CHARS = 160
"""Characters kept back from the stream, so a loop found there is cut before it is shown."""
TAIL_CHARS = 4000
"""Only the end of a reply is searched, so a check costs the same however long it is."""
CHECK_EVERY_CHARS = 32
"""Text without spaces is checked after this many new characters."""

_WORD = re.compile(r"\S+")
_FENCE = "```"
_ENDS = (".", "!", "?", "\u2026", "\u3002", "\uff01", "\uff1f")  # ... and CJK . ! ?


@dataclass(frozen=True, slots=True)
class Loop:
    """A loop at the end of a text: ``copies`` copies of ``unit_words`` words.

    ``cuts`` are the character offsets where each copy ends, first copy first; cutting
    the text at ``cuts[0]`` keeps exactly one copy.
    """

    unit_words: int
    copies: int
    cuts: tuple[int, ...]


def copies_needed(unit_words: int, unit_chars: int = 0, *, in_code: bool = False) -> int:
    """Consecutive copies of a unit of ``unit_words`` words that count as a loop.

    Enough copies to span :data:`MIN_LOOP_WORDS` words or :data:`MIN_LOOP_CHARS`
    characters (``unit_chars`` long, spaces included: a few very long "words" loop too),
    and never fewer than three, or two for a unit of :data:`LONG_UNIT_WORDS` words.
    """
    if in_code:
        least = 2 if unit_words >= CODE_LONG_UNIT_WORDS else MIN_COPIES
        return max(least, math.ceil(CODE_MIN_LOOP_WORDS / unit_words))
    least = 2 if unit_words >= LONG_UNIT_WORDS else MIN_COPIES
    spans = math.ceil(MIN_LOOP_WORDS / unit_words)
    if unit_chars:
        spans = min(spans, math.ceil(MIN_LOOP_CHARS / unit_chars))
    return max(least, spans)


def find_loop(text: str, *, complete: bool = True) -> Loop | None:
    """The loop the text ends in, or None.

    A loop is the last words of the text being the same unit of 1 to
    :data:`MAX_UNIT_WORDS` words repeated :func:`copies_needed` times or more (words
    are compared exactly, whitespace between them is ignored), or, for text without
    spaces, its last :data:`MIN_LOOP_CHARS` characters repeating a period of at most
    :data:`MAX_PERIOD_CHARS`. Inside an open code fence, where code may legitimately
    repeat itself (``[0, 0, 0, ...]``), only a unit of :data:`CODE_MIN_UNIT_WORDS` words
    or more that is no repeat itself, said three times (twice from
    :data:`CODE_LONG_UNIT_WORDS` words) and over :data:`CODE_MIN_LOOP_WORDS` words, is a
    loop. The shortest unit wins. With ``complete`` false the text is still streaming,
    so its last word (unless followed by whitespace) may be unfinished and is left out.
    """
    in_code = text.count(_FENCE) % 2 == 1
    base = max(0, len(text) - TAIL_CHARS)
    matches = list(_WORD.finditer(text, base))
    if base and matches and matches[0].start() == base:
        matches.pop(0)  # may be the end of a word cut by the window
    if not complete and matches and matches[-1].end() == len(text):
        matches.pop()
    words = [m.group() for m in matches]
    for unit in range(1, min(MAX_UNIT_WORDS, len(words) // 2) + 1):
        if words[-1] != words[-1 - unit]:
            continue
        chars = matches[-1].end() - matches[-1 - unit].end()
        need = copies_needed(unit, chars, in_code=in_code)
        if unit * need > len(words):
            continue
        if in_code and (unit < CODE_MIN_UNIT_WORDS or _repeats(words[-unit:])):
            continue
        copies = 1
        while (copies + 1) * unit <= len(words) and _same(words, unit, copies):
            copies += 1
        if copies >= need:
            # The loop may have begun earlier, in the middle of a copy: start it there.
            start = len(words) - copies * unit
            while start > 0 and words[start - 1] == words[start - 1 + unit]:
                start -= 1
            last = start + unit - 1 + _sentence_end(words[start + unit - 1 : start + 2 * unit - 1])
            ends = range(last, len(words), unit)
            return Loop(unit, len(ends), tuple(matches[i].end() for i in ends))
    return None if in_code else _char_loop(text)


def _same(words: list[str], unit: int, copies: int) -> bool:
    """Whether the copy before the last ``copies`` copies equals the last unit."""
    end = len(words) - copies * unit
    return words[end - unit : end] == words[len(words) - unit :]


def _repeats(unit: list[str]) -> bool:
    """Whether ``unit`` is itself a shorter unit said several times."""
    n = len(unit)
    return any(n % p == 0 and unit[p:] == unit[:-p] for p in range(1, n // 2 + 1))


def _sentence_end(words: list[str]) -> int:
    """Index of the first word that ends a sentence, else 0: a loop is cut there."""
    return next((i for i, word in enumerate(words) if word.endswith(_ENDS)), 0)


def _char_loop(text: str) -> Loop | None:
    tail = text.rstrip()
    if len(tail) < MIN_LOOP_CHARS:
        return None
    window = tail[-MIN_LOOP_CHARS:]
    for period in range(1, MAX_PERIOD_CHARS + 1):
        if window[period:] == window[:-period]:
            # Walk back over the whole run of this period, then cut after its first copy.
            start = len(tail) - MIN_LOOP_CHARS
            while start > 0 and tail[start - 1] == tail[start - 1 + period]:
                start -= 1
            ends = range(start + period, len(tail) + 1, period)
            return Loop(period, len(ends), tuple(ends))
    return None


class RepetitionGuard:
    """Passes a streamed reply through and stops it at the first repetition loop.

    Feed each delta to :meth:`feed` and show what it returns; once :attr:`looped` is
    true, stop the model and show what :meth:`finish` returns. The last
    :data:`HOLDBACK_CHARS` characters are held back until then, so the copies of a
    loop found within them are never shown; a reply ends after the earliest copy not
    yet shown. Checks run once per completed word, which keeps the cost per token small.
    """

    def __init__(self, holdback_chars: int = HOLDBACK_CHARS) -> None:
        self._text = ""
        self._shown = 0
        self._holdback = holdback_chars
        self._end: int | None = None
        self._checked = 0
        self.loop: Loop | None = None

    @property
    def looped(self) -> bool:
        """Whether a loop was found; the model should stop."""
        return self.loop is not None

    def feed(self, delta: str) -> str:
        """Add a piece of the reply; return the text that may be shown now."""
        if self.looped:
            return ""
        self._text += delta
        # Look when this delta ended a word, or after a run of text without spaces.
        ended_word = any(c.isspace() for c in delta)
        if ended_word or len(self._text) - self._checked >= CHECK_EVERY_CHARS:
            self._checked = len(self._text)
            loop = find_loop(self._text, complete=False)
            if loop is not None:
                self.loop = loop
                self._end = next((c for c in loop.cuts if c >= self._shown), self._shown)
                return ""
        safe = max(self._shown, len(self._text) - self._holdback)
        out, self._shown = self._text[self._shown : safe], safe
        return out

    def finish(self) -> str:
        """The rest of the reply: what was held back, cut after a loop's first copy."""
        end = len(self._text) if self._end is None else self._end
        if self._end is None and (loop := find_loop(self._text)) is not None:
            self.loop = loop
            end = next((c for c in loop.cuts if c >= self._shown), self._shown)
        out = self._text[self._shown : end]
        self._shown = max(self._shown, end)
        return out
