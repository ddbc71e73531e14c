"""Single-use tokens: taken once, expiry reported, another owner's left in place, capped."""

from __future__ import annotations

from picobot.access.tokens import SingleUseTokens


def test_a_token_is_taken_once_and_reports_expiry() -> None:
    now = [0.0]
    tokens = SingleUseTokens[str](10.0, max_pending=5, clock=lambda: now[0])
    fresh, late = tokens.issue("a"), tokens.issue("b")
    taken = tokens.take(fresh)
    assert taken is not None and taken.value == "a" and not taken.expired
    assert tokens.take(fresh) is None  # used
    now[0] = 11.0
    taken = tokens.take(late)
    assert taken is not None and taken.value == "b" and taken.expired


def test_a_token_that_does_not_belong_stays_for_its_owner() -> None:
    tokens = SingleUseTokens[str](10.0, max_pending=5)
    token = tokens.issue("alice")
    assert tokens.take(token, lambda owner: owner == "bob") is None
    taken = tokens.take(token, lambda owner: owner == "alice")
    assert taken is not None and taken.value == "alice"


def test_past_the_cap_the_oldest_token_goes() -> None:
    tokens = SingleUseTokens[int](10.0, max_pending=2)
    first, second, third = (tokens.issue(n) for n in range(3))
    assert tokens.take(first) is None
    assert [t.value for t in (tokens.take(second), tokens.take(third)) if t] == [1, 2]
