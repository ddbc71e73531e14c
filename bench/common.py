"""What every bench shares: the run plan, the context of one corpus, bench settings."""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.corpus import Scale, TextGen
from picobot.config.settings import Settings

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Plan:
    """How many iterations each bench runs (warm-up iterations are not recorded)."""

    warmup: int = 50
    turn_iters: int = 400
    recall_iters: int = 600
    write_iters: int = 2000
    ws_clients: int = 100
    ws_turns: int = 60
    """Measured turns per WebSocket client (after two warm-up turns each). 6,000 turns
    take several seconds, so the runtime's periodic work (the recall indexer every
    0.5 s, the WAL checkpoint every second) is in the figure; 1,000 turns take about one
    second and could miss most of it."""
    ws_settle_s: float = 1.0
    """Pause between two servers' WebSocket runs, so the server that just ran has
    indexed its last turns (its indexer runs every 0.5 s) before the next one starts."""
    webhook_requests: int = 400
    victim_sessions: int = 1000
    """Sessions of 100 messages for the purged user: 1000 = 100,000 messages."""
    purge_loops: int = 4
    """Other users chatting concurrently during the purge bench."""
    purge_baseline_turns: int = 100
    """Turns per loop measured without a purge."""
    prompt_turns: int = 200
    """Turns of the prompt-cache chat (prefix share, :mod:`bench.prompt_cache`)."""
    ttft_turns: int = 100
    """Turns of the time-to-first-token chat with the bundled model (0 skips it)."""


STANDARD = Plan()
SMOKE = Plan(
    warmup=3,
    turn_iters=20,
    recall_iters=20,
    write_iters=40,
    ws_clients=5,
    ws_turns=3,
    webhook_requests=10,
    victim_sessions=10,
    purge_loops=2,
    purge_baseline_turns=5,
    ws_settle_s=0.0,
    prompt_turns=40,
    ttft_turns=0,
)


def make_progress(stream: Any = None) -> Progress:
    """Progress lines on stderr, each with the seconds since the run started."""
    out = stream if stream is not None else sys.stderr
    started = time.monotonic()

    def emit(message: str) -> None:
        print(f"[{time.monotonic() - started:7.1f}s] {message}", file=out, flush=True)

    return emit


def bench_settings(data_dir: Path, **sections: dict[str, Any]) -> Settings:
    """PicoBot's defaults, on ``data_dir``, with retention off the synthetic timestamps.

    The corpus is dated about 45 days back, inside the default 90-day retention; the
    retention age is raised anyway so that a corpus cached months ago is not swept by
    the retention run every runtime starts with.
    """
    values: dict[str, Any] = {
        "data": {"dir": str(data_dir)},
        "session": {"retention": {"max_age_days": 36500}},
        "logging": {"level": "WARNING"},
    }
    for name, section in sections.items():
        values[name] = {**values.get(name, {}), **section}
    return Settings(**values)


@dataclass(slots=True)
class BenchContext:
    """One corpus under test: its working copy, the plan, a text source."""

    scale: Scale
    db_path: Path
    plan: Plan
    seed: int
    progress: Progress
    store_url: str = ""
    """A PostgreSQL database holding a copy of the corpus (``[store] url``); empty: the
    SQLite working copy at ``db_path``."""
    gen: TextGen = field(init=False)
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        # A different seed from the corpus: bench messages are new text, same language.
        self.gen = TextGen(self.seed, stream=self.seed + 1000)
        self.rng = random.Random(self.seed)

    @property
    def data_dir(self) -> Path:
        """The directory holding the working copy (PicoBot's ``[data] dir``)."""
        return self.db_path.parent

    def settings(self, **sections: dict[str, Any]) -> Settings:
        """Bench settings on this corpus (on ``store_url`` when that is set)."""
        if self.store_url:
            sections = {**sections, "store": {"url": self.store_url, **sections.get("store", {})}}
        return bench_settings(self.data_dir, **sections)

    def users(self, n: int) -> list[int]:
        """``n`` corpus users drawn at random (with repeats)."""
        return [self.rng.randrange(self.scale.users) for _ in range(n)]
