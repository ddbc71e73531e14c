"""Token buckets: one per identity (chat messages) or per peer (failed logins).

A :class:`TokenBucket` allows a steady rate with a burst on top; :class:`PeerBuckets`
keeps one per key (a peer, see :func:`peer_key`) in bounded memory, for limits that an
unauthenticated client must not be able to grow without end.
"""

from __future__ import annotations

import ipaddress
import math
from collections import OrderedDict
from collections.abc import Callable


def peer_key(address: str) -> str:
    """What a per-peer limit counts: an IPv4 address, or the /64 network of an IPv6 one.

    One IPv6 host usually holds a whole /64, so counting single addresses would give it
    as many allowances as it cares to use.
    """
    try:
        ip = ipaddress.ip_address(address.partition("%")[0])
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class TokenBucket:
    """Allow ``per_minute`` messages a minute on average, with bursts of ``burst``."""

    def __init__(self, per_minute: float, burst: int, clock: Callable[[], float]) -> None:
        self._rate = per_minute / 60.0
        self._burst = float(burst)
        self._tokens = float(burst)
        self._clock = clock
        self._last = clock()

    def _refill(self) -> None:
        now = self._clock()
        # A wall clock set back must not take tokens away.
        elapsed = max(0.0, now - self._last)
        self._tokens = min(self._burst, self._tokens + elapsed * self._rate)
        self._last = now

    def take(self) -> bool:
        """Spend one token if there is one; False means the message must be refused."""
        self._refill()
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def wait_secs(self) -> float:
        """Seconds until a token is there (0.0 if one is there now); spends nothing."""
        self._refill()
        return 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) / self._rate

    @property
    def full(self) -> bool:
        """True when the bucket has refilled to its burst (it holds no history)."""
        self._refill()
        return self._tokens >= self._burst


class PeerBuckets:
    """One :class:`TokenBucket` per key: ``burst`` events at once, then ``burst`` per
    ``window_secs``. At most ``max_keys`` buckets are kept: full ones are dropped first
    (they remember nothing), then the least recently used."""

    def __init__(
        self,
        burst: int,
        window_secs: float,
        clock: Callable[[], float],
        *,
        max_keys: int = 10_000,
    ) -> None:
        self._burst = burst
        self._per_minute = burst * 60.0 / window_secs
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def retry_after(self, key: str) -> int | None:
        """Whole seconds ``key`` must wait (at least 1), or None if it may go on now."""
        bucket = self._buckets.get(key)
        if bucket is None:
            return None
        wait = bucket.wait_secs()
        return max(1, math.ceil(wait)) if wait > 0 else None

    def spend(self, key: str) -> None:
        """Count one event of ``key`` (a failed attempt)."""
        bucket = self._buckets.get(key)
        if bucket is None:
            self._make_room()
            bucket = TokenBucket(self._per_minute, self._burst, self._clock)
            self._buckets[key] = bucket
        self._buckets.move_to_end(key)
        bucket.take()

    def _make_room(self) -> None:
        if len(self._buckets) < self._max_keys:
            return
        for key in [k for k, b in self._buckets.items() if b.full]:
            del self._buckets[key]
        while len(self._buckets) >= self._max_keys:
            self._buckets.popitem(last=False)
