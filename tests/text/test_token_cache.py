"""Token estimates are cached by a hash of their text: reused, bounded, no text kept."""

from __future__ import annotations

from picobot.text import tokens
from picobot.text.tokens import ScriptTokenEstimator, forget_texts


def test_a_text_is_estimated_once_and_the_cache_keeps_no_text() -> None:
    seen: list[str] = []

    def compute(text: str) -> int:
        seen.append(text)
        return len(text)

    cache = tokens._ByHash(compute, kept=3)
    secret = "my bike lock code is Wombatine"
    assert cache(secret) == cache(secret) == len(secret)
    assert seen == [secret]  # the second call was answered from the cache
    assert secret not in repr(vars(cache)["_known"])  # hashes and results only
    for text in ("a", "bb"):
        cache(text)
    assert len(cache) == 3
    cache("ccc")  # full: it starts again rather than growing
    assert len(cache) == 1
    cache.clear()
    assert len(cache) == 0


def test_cached_estimates_equal_fresh_ones_and_a_deletion_forgets_them() -> None:
    estimator = ScriptTokenEstimator()
    texts = ["we hiked the ridge at dawn", "LOUD WORDS", "über den Fjord 你好", ""]
    first = [estimator.estimate(t) for t in texts]
    assert len(tokens._script_estimate) >= 3
    assert [estimator.estimate(t) for t in texts] == first == [tokens._estimate(t) for t in texts]
    forget_texts()
    assert len(tokens._script_estimate) == len(tokens._ascii_counts) == 0
