"""Erasure on PostgreSQL, checked in the server's own files.

A throwaway cluster of this module's own, so its data directory can be scanned byte by
byte as the SQLite tests scan theirs (tests/privacy/test_erasure.py). What is asserted
is what docs/privacy.md#postgresql promises: no text a user wrote reaches any file of
the cluster in clear (tables, indexes, TOAST, the WAL), and after a user purge the
user's wrapped key is in none of the database's files, so no copy of what they sealed
opens again, even with the master key.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from picobot.store.db import Database
from picobot.store.erasure.erase import erase_residue
from picobot.store.erasure.purge import PurgeStore
from picobot.store.keys.sealing import ERASED, Sealer
from picobot.store.postgres.keyring import PostgresKeyRing
from picobot.store.retrieval.terms import user_token
from tests.pg.cluster import Cluster, create_database
from tests.privacy.test_erasure import Person, scan

MASTER = secrets.token_bytes(32)


@pytest.fixture(scope="module")
def cluster(postgres_bindir: Path) -> Iterator[Cluster]:
    with Cluster.start(postgres_bindir) as server:
        yield server


def checkpoint(url: str) -> None:
    """Flush every dirty page to the data files (the scan reads files, not memory)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def written(person: Person) -> list[str]:
    """The markers of what ``person`` wrote (their id is stored in clear, by design)."""
    ids = {person.marker_in_id, user_token(person.user_id)}
    return [m for m in person.markers if m not in ids]


async def test_no_text_reaches_the_files_and_a_purged_users_key_leaves_them(
    cluster: Cluster, tmp_path: Path
) -> None:
    url = create_database(cluster.url)
    rng = random.Random(20261129)
    ring = PostgresKeyRing.open_url(url, MASTER, "test")
    db = await Database.open(tmp_path / "data" / "c.db", url=url, keys=ring)
    try:
        alice, bob = Person("alice", rng), Person("bob", rng)
        for n in range(2):
            await alice.fill(db, f"a{n}")
            await bob.fill(db, f"b{n}")
        await alice.remember(db)
        await bob.remember(db)
        sealed = await db.fetchall(
            "SELECT s.user_id, m.content FROM messages m JOIN sessions s ON s.id = m.session_id"
        )
        wrapped = await db.fetchone(
            "SELECT wrapped FROM picobot_keys.user_keys WHERE user_id = ?", (alice.user_id,)
        )
        assert wrapped is not None
        key_bytes = bytes(wrapped[0]).hex()
        checkpoint(url)
        # The scan does see the database: the ids, stored in clear, are in its files.
        assert alice.marker_in_id in scan(cluster.data_dir, [alice.marker_in_id])
        assert scan(cluster.data_dir, written(alice) + written(bob)) == {}

        await PurgeStore(db).delete_user(alice.user_id, batch_size=5)
        await erase_residue(db)
        checkpoint(url)
        base = cluster.data_dir / "base"
        key_files = [
            p for p in base.rglob("*") if p.is_file() and bytes.fromhex(key_bytes) in p.read_bytes()
        ]
        assert key_files == []
        # Another instance, master key in hand, opens none of alice's sealed texts.
        other = PostgresKeyRing.open_url(url, MASTER, "test")
        try:
            opened = {str(owner): Sealer(other).open(bytes(blob)) for owner, blob in sealed if blob}
        finally:
            other.close()
        assert opened[alice.user_id] == ERASED
        assert opened[bob.user_id] != ERASED
        assert scan(cluster.data_dir, written(bob)) == {}  # still sealed, still readable
    finally:
        await db.close()
        ring.close()
