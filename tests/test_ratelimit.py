"""Per-peer token buckets: budgets, waits and bounded memory."""

from __future__ import annotations

import pytest

from picobot.ratelimit import PeerBuckets, TokenBucket, peer_key


def test_peer_buckets_allow_a_burst_then_say_how_long_to_wait() -> None:
    now = [0.0]
    buckets = PeerBuckets(burst=3, window_secs=30, clock=lambda: now[0])
    assert buckets.retry_after("a") is None
    for _ in range(3):
        buckets.spend("a")
    assert buckets.retry_after("a") == 10  # one back every 30 s / 3
    assert buckets.retry_after("b") is None  # another peer is not affected
    now[0] += 9.5
    assert buckets.retry_after("a") == 1  # rounded up, never 0
    now[0] += 0.5
    assert buckets.retry_after("a") is None


def test_peer_buckets_forget_full_buckets_first_then_the_oldest() -> None:
    now = [0.0]
    buckets = PeerBuckets(burst=1, window_secs=60, clock=lambda: now[0], max_keys=2)
    buckets.spend("old")
    now[0] += 60  # "old" has refilled: it remembers nothing worth keeping
    buckets.spend("a")
    buckets.spend("b")
    assert buckets.retry_after("old") is None
    assert buckets.retry_after("a") is not None and buckets.retry_after("b") is not None
    buckets.spend("c")  # no full bucket left: the least recently used goes
    assert buckets.retry_after("a") is None
    assert buckets.retry_after("b") is not None and buckets.retry_after("c") is not None


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),  # the same host, as far as caps go
        ("2001:db8:1:3::1", "2001:db8:1:3::/64"),
        ("::ffff:203.0.113.7", "203.0.113.7"),  # IPv4 on a dual-stack socket
        ("fe80::1%eth0", "fe80::/64"),
        ("not-an-address", "not-an-address"),
    ],
)
def test_peer_key_counts_an_ipv6_host_by_its_64(address: str, key: str) -> None:
    assert peer_key(address) == key


def test_a_clock_set_back_takes_no_tokens_away() -> None:
    now = [1000.0]
    bucket = TokenBucket(per_minute=60, burst=2, clock=lambda: now[0])
    assert bucket.take()
    now[0] -= 500  # the wall clock jumps back
    assert bucket.take()
    assert bucket.wait_secs() == 1.0
