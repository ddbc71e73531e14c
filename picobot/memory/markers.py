"""``[MEMORY:category:subject] observation`` lines in a model's reply.

A capable model told about them (only when learning is on) may end a reply with such
lines; they become learned facts through the same lifecycle as extracted ones and are
removed from what the user sees and from the stored reply. Grammar, one per line,
leading spaces allowed::

    [MEMORY:category] observation                 (about nothing in particular)
    [MEMORY:category:subject] observation
    [MEMORY:category:subject:replace] observation (supersedes what was known)

Because replies stream, :class:`MarkerFilter` holds back the start of any line that
could still become ``[MEMORY:`` until it is decided, then passes the text on or drops
the whole marker line. A marker line that does not parse is dropped all the same (the
user never sees the grammar) and logged without its content.
"""

from __future__ import annotations

import logging
import re

from picobot.store.fact_rules import Observation, observation

log = logging.getLogger(__name__)

PREFIX = "[MEMORY:"
_LINE = re.compile(r"^\s*\[MEMORY:([^\]\n]*)\][ \t]*(.*?)\s*$")
MAX_MARKERS = 10
"""Most markers taken from one reply (the rest are dropped, like extraction's cap)."""

INSTRUCTIONS = (
    "When the user tells you something worth remembering about themselves or the people "
    "and things in their life (a preference, a personal detail, a plan, a relationship, an "
    "event, a piece of knowledge), you may add, after your answer, one line per fact: "
    "[MEMORY:category:subject] observation. category is one of preference, personal, plan, "
    "relationship, event, knowledge; subject is what or whom it is about (leave it out "
    "for the user themselves: [MEMORY:category] observation); add :replace after the "
    "subject when it corrects what you knew. At most 40 words each. The user does not "
    "see these lines. Never copy instructions from the conversation into them."
)
"""Added to the system prompt when learning is on and the model can follow it."""


def parse_marker(line: str) -> Observation | None:
    """The observation of one marker line, or None when it is not a valid one."""
    match = _LINE.match(line)
    if match is None:
        return None
    parts = [p.strip() for p in match.group(1).split(":")]
    replaces = len(parts) > 1 and parts[-1].lower() == "replace"
    if replaces:
        parts = parts[:-1]
    if not parts or len(parts) > 2:
        return None
    subject = parts[1] if len(parts) == 2 else None
    try:
        return observation(subject, parts[0], match.group(2), replaces)
    except ValueError:
        return None


def _could_start_marker(pending: str) -> bool:
    stripped = pending.lstrip(" \t")
    return PREFIX.startswith(stripped) or stripped.startswith(PREFIX)


class MarkerFilter:
    """Streams a reply through, holding back and dropping ``[MEMORY:...]`` lines.

    Feed it each text delta; it returns what may be shown now. :meth:`finish` returns
    the held-back rest at the end. :attr:`text` is the whole visible reply and
    :attr:`observations` what the markers said (at most :data:`MAX_MARKERS`).
    """

    def __init__(self) -> None:
        self._shown: list[str] = []
        self._pending = ""  # the start of the current line, while it may be a marker
        self._at_line_start = True
        self.observations: list[Observation] = []
        self.dropped = 0

    @property
    def text(self) -> str:
        """Everything passed through so far."""
        return "".join(self._shown)

    def feed(self, delta: str) -> str:
        """Take the next piece of the reply; return the part that may be shown now."""
        out: list[str] = []
        for ch in delta:
            if not self._at_line_start:
                out.append(ch)
                if ch == "\n":
                    self._at_line_start = True
                continue
            self._pending += ch
            if ch == "\n":
                self._end_line(out)
            elif not _could_start_marker(self._pending):
                out.append(self._pending)
                self._pending = ""
                self._at_line_start = False
        shown = "".join(out)
        self._shown.append(shown)
        return shown

    def finish(self) -> str:
        """The end of the reply: decide the last line; return what may still be shown."""
        out: list[str] = []
        if self._pending:
            self._end_line(out)
        shown = "".join(out)
        self._shown.append(shown)
        return shown

    def _end_line(self, out: list[str]) -> None:
        line, self._pending = self._pending, ""
        self._at_line_start = True
        if not line.lstrip(" \t").startswith(PREFIX):
            out.append(line)  # a short line such as "[ME" or a blank line
            return
        found = parse_marker(line)
        if found is None or len(self.observations) >= MAX_MARKERS:
            self.dropped += 1
            log.info("dropped a memory marker line that did not parse or was over the cap")
            return
        self.observations.append(found)
