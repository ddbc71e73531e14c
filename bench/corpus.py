"""The synthetic corpus: realistic chat text, generated fast, cached by scale and seed.

Text comes from a Zipf-distributed vocabulary (exponent 1.07, 30,000 words): the top
ranks are real English function words, the rest pseudo-words whose length grows with
their rank, as in natural language, where the long words are the rare ones. Messages
hold 20-40 words.

Layout of a corpus: ``users`` users (``ws:user0000``...), each with
``sessions_per_user`` sessions of 100 messages (user and assistant alternating), 20
memories, a stored summary covering the first 80 messages of every session, two facts
learned from every session with all its messages marked as read by learning, and the
last session as the chat's current one. Sessions run in waves, one session of every
user per wave, with messages interleaved across the wave's sessions as concurrent
chats would write them (so each user's rows are spread over the whole id range, as in
a live database).

The database file is created by PicoBot's own migrations (``Database.open``), so the
schema, the FTS5 table and its triggers are the real ones; rows are then bulk-inserted
with plain ``sqlite3.executemany`` in transactions of 100,000 messages, each indexed
by :func:`picobot.store.retrieval.search_writes.index_pending` in its transaction (the runtime's
indexer, on a bigger batch). The finished file is cached under
``bench/.cache/`` keyed by scale, seed, generator version and migration count.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import shutil
import sqlite3
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from picobot.config.keys import KeySettings
from picobot.store.connect import install_functions
from picobot.store.db import Database
from picobot.store.keys import open_keyring
from picobot.store.keys.keyring import KEY_STORE_FILE, KeyRing
from picobot.store.keys.master import DEFAULT_KEY_FILE
from picobot.store.keys.sealing import Sealer
from picobot.store.learned.fact_rules import CATEGORIES
from picobot.store.migrations import MIGRATIONS
from picobot.store.retrieval.search_writes import index_pending
from picobot.store.retrieval.terms import index_text
from picobot.store.task_runs import ERASE_TASK_NAME, RESIDUE_ERASED, TASK_NAME

GEN_VERSION = 4
"""Bump when the generator changes, so cached corpora are rebuilt."""

VOCABULARY_SIZE = 30_000
ZIPF_EXPONENT = 1.07
MEMORIES_PER_USER = 20
TOPICS_PER_USER = 40
TOPIC_RANKS = (150, 6000)
"""Vocabulary ranks a user's topic words come from: neither filler nor hapaxes."""
SUMMARY_COVERS = 80
FACTS_PER_SESSION = 2
"""Facts learned from each session: 20 a user at 1M, fewer than the 50 a prompt shows."""
COMMIT_ROWS = 100_000
VICTIM = 900_000
"""User index of the user a purge bench builds and deletes (``ws:user900000``)."""


def _words(text: str) -> list[str]:
    return text.split()


_COMMON = _words(
    """
    the i you to and a it of is that in what for my was this me on do have be with but
    not so can are just like about know if your at get think we how don't would will no
    there all he they one out up time when go could yes some good did see from people
    then make as want by them now more she her him an or really been say need much got
    well here back day work today right because going very too also thing still
    """
)
_ONSETS = _words("b c d f g h j k l m n p r s t v w z br ch cl dr fl gr pl pr sh st th tr")
_VOWELS = _words("a e i o u ai ea ee ie oo ou")
_CODAS = ["", "", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ck"]

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Scale:
    """How big a corpus is."""

    name: str
    users: int
    sessions_per_user: int
    messages_per_session: int = 100

    @property
    def messages(self) -> int:
        """Messages in the corpus."""
        return self.users * self.sessions_per_user * self.messages_per_session


SCALES = {
    "100k": Scale("100k", users=1000, sessions_per_user=1),
    "1M": Scale("1M", users=1000, sessions_per_user=10),
}
TINY = Scale("2k", users=20, sessions_per_user=1)
"""The smoke test's corpus."""


def user_name(index: int) -> str:
    """The WebSocket identity of corpus user ``index`` (``user0007``)."""
    return f"user{index:04d}"


def user_id(index: int) -> str:
    """The PicoBot user id of corpus user ``index``, as the WebSocket channel makes it."""
    return f"ws:{user_name(index)}"


def session_id(user: int, k: int) -> str:
    """Session ``k`` of user ``user``: 12 hex characters, like PicoBot's own ids."""
    return f"{user:06x}{k:06x}"


class TextGen:
    """Deterministic chat text from a Zipf vocabulary."""

    def __init__(
        self, seed: int, stream: int | None = None, vocabulary_size: int = VOCABULARY_SIZE
    ) -> None:
        """The vocabulary and users' topics follow ``seed``; the text drawn follows
        ``stream`` (default: ``seed``), so a bench can write new messages in the very
        language of a corpus."""
        draw = seed if stream is None else stream
        self._seed = seed
        self._rng = np.random.default_rng(draw)
        self._topic_rng = random.Random(draw + 1)
        self._topic_cache: dict[int, list[str]] = {}
        pick = random.Random(seed).choice
        words: list[str] = list(_COMMON)
        seen = set(words)
        while len(words) < vocabulary_size:
            rank = len(words)
            # Longer words for rarer ranks: about log10(rank) syllables, give or take one.
            syllables = max(1, int(math.log10(rank + 1)) - 2 + len(pick(("", "x", "xx"))))
            word = "".join(pick(_ONSETS) + pick(_VOWELS) for _ in range(syllables))
            word += pick(_CODAS)
            if word not in seen:
                seen.add(word)
                words.append(word)
        self.vocabulary = words
        self._words = np.array(words, dtype=object)
        weights = 1.0 / np.arange(1, vocabulary_size + 1) ** ZIPF_EXPONENT
        cdf = np.cumsum(weights)
        self._cdf = cdf / cdf[-1]

    def texts(self, n: int, low: int = 20, high: int = 40) -> list[str]:
        """``n`` messages of ``low``-``high`` words."""
        lengths = self._rng.integers(low, high + 1, n)
        picks = np.searchsorted(self._cdf, self._rng.random(int(lengths.sum())))
        words: list[str] = self._words[picks].tolist()
        offsets: list[int] = np.concatenate(([0], np.cumsum(lengths))).tolist()
        return [" ".join(words[offsets[i] : offsets[i + 1]]) + "." for i in range(n)]

    def stream(self, chunk: int = 20_000) -> Iterator[str]:
        """An endless supply of messages."""
        while True:
            yield from self.texts(chunk)

    def topics(self, user: int) -> list[str]:
        """The words ``user`` keeps coming back to (names, places, projects, hobbies)."""
        rng = random.Random(self._seed * 1_000_003 + user)
        return rng.sample(self.vocabulary[TOPIC_RANKS[0] : TOPIC_RANKS[1]], TOPICS_PER_USER)

    def about(self, user: int, text: str) -> str:
        """``text`` with a few of its words swapped for ``user``'s topic words.

        People talk about their own things, so their messages share words across
        sessions; that is what recall finds.
        """
        rng = self._topic_rng
        topics = self._topic_cache.get(user)
        if topics is None:
            topics = self._topic_cache[user] = self.topics(user)
        words = text.split(" ")
        for _ in range(rng.randint(1, 3)):
            words[rng.randrange(len(words) - 1)] = rng.choice(topics)
        return " ".join(words)

    def texts_for(self, users: Sequence[int], low: int = 20, high: int = 40) -> list[str]:
        """One message about each of ``users``' topics."""
        return [
            self.about(u, t) for u, t in zip(users, self.texts(len(users), low, high), strict=True)
        ]


def cache_path(cache_dir: Path, scale: Scale, seed: int) -> Path:
    """Where the corpus of ``scale`` and ``seed`` is cached.

    The key holds what changes the file: the generator, the schema (migration count)
    and how the recall index writes a user's words (a change there needs a new file).
    """
    terms = zlib.crc32((index_text("probe", "word") or "").encode()) % 10_000
    name = f"corpus-{scale.name}-s{seed}-g{GEN_VERSION}-m{len(MIGRATIONS)}-t{terms:04d}.db"
    return cache_dir / name


def keys_dir(corpus: Path) -> Path:
    """The key store and master key that seal ``corpus`` (a directory beside it)."""
    return corpus.with_name(corpus.stem + ".keys")


def ensure_corpus(cache_dir: Path, scale: Scale, seed: int, progress: Progress) -> Path:
    """The cached corpus file, generated first if it is not there yet.

    Its texts are sealed with per-user keys, as a server stores them; the keys live
    in :func:`keys_dir` and travel with every copy (:func:`work_copy`).
    """
    path = cache_path(cache_dir, scale, seed)
    if path.exists() and (keys_dir(path) / KEY_STORE_FILE).exists():
        progress(f"corpus {scale.name}: cached at {path}")
        return path
    cache_dir.mkdir(parents=True, exist_ok=True)
    building = path.with_name(path.name + ".building")
    for stale in _db_files(building):
        stale.unlink(missing_ok=True)
    shutil.rmtree(keys_dir(path), ignore_errors=True)
    started = time.perf_counter()
    progress(f"corpus {scale.name}: generating {scale.messages:,} messages (seed {seed})")
    asyncio.run(_create_schema(building))
    ring = open_keyring(keys_dir(path), KeySettings(), {})
    conn = _bulk_connection(building, ring)
    try:
        _bind(conn, ring)
        populate(conn, TextGen(seed), range(scale.users), scale, progress)
        conn.execute("PRAGMA journal_mode=WAL")
    finally:
        conn.close()
        ring.close()
    os.replace(building, path)
    progress(f"corpus {scale.name}: done in {time.perf_counter() - started:.1f} s")
    return path


def work_copy(corpus: Path, work_dir: Path) -> Path:
    """A fresh copy of ``corpus`` as ``work_dir/conversations.db`` (benches write to it)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    dest = work_dir / "conversations.db"
    for stale in _db_files(dest):
        stale.unlink(missing_ok=True)
    shutil.copyfile(corpus, dest)
    for name in (KEY_STORE_FILE, DEFAULT_KEY_FILE):
        (work_dir / name).unlink(missing_ok=True)
        shutil.copy2(keys_dir(corpus) / name, work_dir / name)
    _retention_done(dest)
    return dest


def _bind(conn: sqlite3.Connection, ring: KeyRing) -> None:
    """Record the key store and the keyed index terms, as a server's first start does."""
    conn.executemany(
        "INSERT INTO store_meta (name, value) VALUES (?, ?)",
        [("key_store", ring.store_id), ("index_terms", Sealer(ring).terms_scheme)],
    )


def _retention_done(db_path: Path) -> None:
    """Record a finished retention run and erasure now, as a running server would have.

    Without them the server's first retention run takes the copy for one a failed run
    may have left residue in, and erases: a VACUUM during the WebSocket warm-up (16 s
    at 1M) that also leaves the index optimized (one segment instead of the corpus's
    twelve, which a live server never keeps).
    """
    now = time.time()
    conn = sqlite3.connect(db_path)
    try:
        with conn:
            conn.executemany(
                "INSERT OR REPLACE INTO task_runs (name, last_started_at, last_finished_at, ok,"
                " result) VALUES (?, ?, ?, 1, ?)",
                [
                    (TASK_NAME, now, now, "bench corpus"),
                    (ERASE_TASK_NAME, now, now, RESIDUE_ERASED),
                ],
            )
    finally:
        conn.close()


def add_victim(db_path: Path, sessions: int, seed: int, progress: Progress) -> str:
    """Give user :data:`VICTIM` ``sessions`` sessions of 100 messages; return the user id."""
    ring = open_keyring(db_path.parent, KeySettings(), {})
    conn = _bulk_connection(db_path, ring, wal=True)
    try:
        scale = Scale("victim", users=1, sessions_per_user=sessions)
        populate(conn, TextGen(seed, stream=seed + 1), [VICTIM], scale, progress, current=False)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
        ring.close()
    return user_id(VICTIM)


def populate(
    conn: sqlite3.Connection,
    gen: TextGen,
    users: Sequence[int],
    scale: Scale,
    progress: Progress,
    *,
    current: bool = True,
) -> None:
    """Insert sessions, memories, messages (in waves) and summaries for ``users``.

    The index is merged by FTS5's automerge while loading, which leaves about as many
    segments as a live server keeps under steady writes (7 at 100k, 11 at 1M). Merging
    each loading batch fully instead (``SearchIndex.tidy``) would leave 2 and 5, fewer
    than a server holds under load, and make every query cheaper than in real use.
    """
    conn.execute("INSERT INTO search_index (search_index, rank) VALUES ('automerge', 4)")
    try:
        _populate(conn, gen, users, scale, progress, current=current)
    finally:
        conn.execute("INSERT INTO search_index (search_index, rank) VALUES ('automerge', 0)")


def _populate(
    conn: sqlite3.Connection,
    gen: TextGen,
    users: Sequence[int],
    scale: Scale,
    progress: Progress,
    *,
    current: bool,
) -> None:
    base = time.time() - 45 * 86400.0
    per = scale.messages_per_session
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO sessions (id, channel, chat_id, user_id, created_at, last_active)"
        " VALUES (?, 'ws', ?, ?, ?, ?)",
        (
            (session_id(u, k), user_id(u), user_id(u), base + k * 3600.0, base + k * 3600.0)
            for u in users
            for k in range(scale.sessions_per_user)
        ),
    )
    if current:
        last = scale.sessions_per_user - 1
        conn.executemany(
            "INSERT INTO current_sessions (channel, chat_id, user_id, session_id)"
            " VALUES ('ws', ?, ?, ?)",
            ((user_id(u), user_id(u), session_id(u, last)) for u in users),
        )
    notes = gen.texts_for([u for u in users for _ in range(MEMORIES_PER_USER)], 6, 16)
    conn.executemany(
        "INSERT INTO user_memories (user_id, key, key_tag, content, created_at, updated_at)"
        " VALUES (?1, picobot_seal(?1, ?2), picobot_tag(?1, ?2), picobot_seal(?1, ?3), ?4, ?5)",
        (
            (user_id(u), f"note_{j}", notes[i * MEMORIES_PER_USER + j], base, base + j)
            for i, u in enumerate(users)
            for j in range(MEMORIES_PER_USER)
        ),
    )
    conn.execute("COMMIT")
    total = len(users) * scale.sessions_per_user * per
    texts = gen.stream()
    done = 0
    started = time.perf_counter()
    batch: list[tuple[str, int, str, str, int, float]] = []
    for k in range(scale.sessions_per_user):
        # One wave: session k of every user, their messages interleaved in time.
        for seq in range(1, per + 1):
            role = "user" if seq % 2 else "assistant"
            for u in users:
                text = gen.about(u, next(texts))
                at = base + k * 3600.0 + seq * 30.0 + (u % 1000) * 0.01
                batch.append((session_id(u, k), seq, role, text, math.ceil(len(text) / 4), at))
            if len(batch) >= COMMIT_ROWS:
                done += _flush(conn, batch)
                _report(progress, done, total, started)
    if batch:
        done += _flush(conn, batch)
        _report(progress, done, total, started)
    summaries = gen.texts_for([u for u in users for _ in range(scale.sessions_per_user)], 60, 120)
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO session_summaries (session_id, summary, covered_seq, token_estimate,"
        " updated_at) VALUES (?1, picobot_seal((SELECT user_id FROM sessions WHERE id = ?1),"
        " ?2), ?3, ?4, ?5)",
        (
            (session_id(u, k), summaries[i], min(SUMMARY_COVERS, per), 150, base)
            for i, (u, k) in enumerate(
                (u, k) for u in users for k in range(scale.sessions_per_user)
            )
        ),
    )
    conn.execute("COMMIT")
    _learned(conn, gen, users, scale, base)


def _learned(
    conn: sqlite3.Connection, gen: TextGen, users: Sequence[int], scale: Scale, base: float
) -> None:
    """What background learning leaves of every session, as on a server with learning on
    (the default) once its sessions went idle: a few facts, each with its source (the
    session's last user message), and every message read (``fact_progress``)."""
    sessions = [(u, k) for u in users for k in range(scale.sessions_per_user)]
    per = scale.messages_per_session
    last_user_seq = per if per % 2 else per - 1
    texts = iter(gen.texts_for([u for u, _ in sessions for _ in range(FACTS_PER_SESSION)], 6, 14))
    conn.execute("BEGIN")
    for i, (u, k) in enumerate(sessions):
        sid, at = session_id(u, k), base + k * 3600.0 + per * 30.0
        for j in range(FACTS_PER_SESSION):
            category = CATEGORIES[(i + j) % len(CATEGORIES)]
            conn.execute(
                "INSERT INTO facts (user_id, category, text, confidence, created_at, updated_at)"
                " VALUES (?1, ?2, picobot_seal(?1, ?3), ?4, ?5, ?5)",
                (user_id(u), category, next(texts), 0.5 + 0.1 * ((i + j) % 5), at),
            )
            conn.execute(
                "INSERT INTO fact_sources (fact_id, session_id, message_id, created_at)"
                " VALUES (last_insert_rowid(), ?1,"
                " (SELECT id FROM messages WHERE session_id = ?1 AND seq_order = ?2), ?3)",
                (sid, last_user_seq, at),
            )
        conn.execute(
            "INSERT INTO fact_progress (session_id, covered_seq, updated_at) VALUES (?, ?, ?)",
            (sid, per, at),
        )
    conn.execute("COMMIT")


def _flush(conn: sqlite3.Connection, batch: list[tuple[str, int, str, str, int, float]]) -> int:
    n = len(batch)
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO messages (session_id, seq_order, role, content, token_estimate,"
        " created_at) VALUES (?1, ?2, ?3,"
        " picobot_seal((SELECT user_id FROM sessions WHERE id = ?1), ?4), ?5, ?6)",
        batch,
    )
    index_pending(conn, None)  # as the server's indexer does: one segment per batch
    conn.execute("COMMIT")
    batch.clear()
    return n


def _report(progress: Progress, done: int, total: int, started: float) -> None:
    elapsed = time.perf_counter() - started
    rate = done / elapsed if elapsed > 0 else 0.0
    progress(f"  {done:,}/{total:,} messages ({100 * done // total}%, {rate:,.0f}/s)")


async def _create_schema(path: Path) -> None:
    db = await Database.open(path)
    await db.close()


def _bulk_connection(path: Path, ring: KeyRing, *, wal: bool = False) -> sqlite3.Connection:
    # Bulk-load settings: no sync and (for a new file) no journal; a crash leaves only
    # the ``.building`` file, which the next run deletes and regenerates.
    conn = sqlite3.connect(path, isolation_level=None)
    # Texts are sealed and the index triggers compute keyed per-user terms.
    install_functions(conn, Sealer(ring))
    if not wal:
        conn.execute("PRAGMA journal_mode=OFF")
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA cache_size=-1048576")
    conn.execute("PRAGMA temp_store=MEMORY")
    return conn


def _db_files(path: Path) -> list[Path]:
    return [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
