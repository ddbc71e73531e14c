"""The recalled-records block of a prompt: packing ranked records into a budget, rendering.

Records come ranked from :func:`picobot.store.retrieval.recall.recall_records`. They are packed
best first into the tokens the rest of the prompt leaves (at least
``recall_budget_tokens``), then rendered grouped by session, oldest session first,
each group headed by the day it happened, so the model can answer "when" questions
("On Monday 8 May 2023:") and reads each excerpt in its order. Every record is one
line with its role, escaped so it can neither leave the ``<data>`` block nor pose as a
header.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from picobot.store.retrieval.search import SearchHit
from picobot.text.tokens import TokenEstimator, truncate_to_tokens
from picobot.text.untrusted import escape_data, one_line


@dataclass(frozen=True, slots=True)
class RecallLine:
    """One packed record: its rendered line and that line's cost (one newline included)."""

    hit: SearchHit
    text: str
    cost: int


@functools.lru_cache(maxsize=4096)
def _day(day: int) -> str:
    # "Monday 8 May 2023", in UTC like every stored time; strftime's %-d is not portable.
    t = time.gmtime(day * 86400)
    return f"{time.strftime('%A', t)} {t.tm_mday} {time.strftime('%B %Y', t)}"


def day_header(ts: float) -> str:
    """The line that opens a session's excerpt: the day of its first record."""
    return f"On {_day(int(ts // 86400))}:"


def _line(hit: SearchHit) -> str:
    return _rendered(hit.role or "user", hit.text)


@functools.lru_cache(maxsize=8192)
def _rendered(role: str, text: str) -> str:
    # Cached: recall meets the same records turn after turn, and rendering them was half
    # of packing. Keyed by the texts, so :func:`forget_lines` empties it on deletions.
    return f"{role}: {escape_data(one_line(text))}"


def forget_lines() -> None:
    """Empty the cache of rendered lines, keyed by the records' texts: a purge or a
    deletion calls this so no deleted text stays in this process's memory."""
    _rendered.cache_clear()


MISSES_WHEN_FULL = 16
"""Records in a row too long for what is left, after which the block counts as full.

Past that point a shorter record further down is rarely found, and estimating each
of the remaining records (a few hundred at 1M messages) was most of a turn's Python
work."""


def pack(
    hits: Sequence[SearchHit],
    estimator: TokenEstimator,
    *,
    budget: int,
    item_cap: int,
    skip_texts: Iterable[str] = (),
    misses_when_full: int = MISSES_WHEN_FULL,
) -> list[RecallLine]:
    """The best records that fit ``budget`` tokens, best first (headers counted).

    A record too long for what is left is passed over for shorter ones after it, until
    ``misses_when_full`` in a row were; each is cut to ``item_cap`` first.
    ``skip_texts``: texts the prompt holds already (a fork's parent repeats the
    window's messages).
    """
    skip = set(skip_texts)
    cap = min(item_cap, budget)
    lines: list[RecallLine] = []
    sessions: set[str | None] = set()
    used = misses = 0
    for hit in hits:
        # No line costs less than 2 tokens (a token and its line break).
        if budget - used < 2 or misses >= misses_when_full:
            break
        if hit.text in skip:
            continue
        text = _line(hit)
        tokens = estimator.estimate(text)
        if tokens > cap:
            text = truncate_to_tokens(estimator, text, cap)
            tokens = estimator.estimate(text)
        cost = tokens + 1
        if hit.session_id not in sessions:
            cost += estimator.estimate(day_header(hit.created_at)) + 2
        if used + cost > budget:
            misses += 1
            continue
        misses = 0
        lines.append(RecallLine(hit, text, cost))
        sessions.add(hit.session_id)
        used += cost
    return lines


def _ordered(lines: Iterable[RecallLine]) -> list[list[RecallLine]]:
    """Lines grouped by session: groups by their first record's time, lines by position."""
    groups: dict[str | None, list[RecallLine]] = {}
    for line in lines:
        groups.setdefault(line.hit.session_id, []).append(line)
    for group in groups.values():
        group.sort(key=lambda r: (r.hit.seq_order or 0, r.hit.created_at))
    return sorted(groups.values(), key=lambda g: (g[0].hit.created_at, g[0].hit.seq_order or 0))


def render(lines: Iterable[RecallLine]) -> str:
    """The block's body: each session's excerpt under its day, oldest first."""
    return "\n".join(body_lines(lines))


def body_lines(lines: Iterable[RecallLine]) -> list[str]:
    """The lines of :func:`render`'s text (at least one, which may be empty)."""
    out: list[str] = []
    for group in _ordered(lines):
        if out:
            out.append("")
        out.append(day_header(group[0].hit.created_at))
        out += [line.text for line in group]
    return out or [""]


def cost(lines: Sequence[RecallLine]) -> int:
    """An upper bound of :func:`render`'s cost for these lines.

    Each session's header is in the cost of its best line, which :func:`pack` takes
    first and trimming (worst first) drops last; add one token for each blank line
    between sessions.
    """
    sessions = {line.hit.session_id for line in lines}
    return sum(line.cost for line in lines) + len(sessions)
