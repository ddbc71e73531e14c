"""The one backoff policy and the one Retry-After parser every retry uses."""

from __future__ import annotations

import email.utils

import pytest

from picobot.backoff import (
    RETRY_AFTER_CEILING_SECS,
    Backoff,
    FailureBackoff,
    parse_retry_after,
    retry_after_secs,
)
from picobot.llm.retry import RetryPolicy

NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("12", 12.0),
        (" 7 ", 7.0),
        ("0", 0.0),
        ("0.5", 0.5),
        ("-3", 0.0),
        ("-0.5", 0.0),
        # Longer than any policy honours: read as a day, and always a finite number.
        ("999999999999", RETRY_AFTER_CEILING_SECS),
        ("9" * 400, RETRY_AFTER_CEILING_SECS),
        ("1e400", RETRY_AFTER_CEILING_SECS),
        ("inf", RETRY_AFTER_CEILING_SECS),
    ],
)
def test_delay_seconds(value: str, expected: float) -> None:
    assert retry_after_secs(value, now=NOW) == expected


def test_http_dates_count_from_now() -> None:
    in_a_minute = email.utils.formatdate(NOW + 60, usegmt=True)
    assert retry_after_secs(in_a_minute, now=NOW) == 60.0
    # A date in the past means "now"; one far ahead is read as a day.
    assert retry_after_secs(email.utils.formatdate(NOW - 600, usegmt=True), now=NOW) == 0.0
    far = email.utils.formatdate(NOW + 10 * 86_400, usegmt=True)
    assert retry_after_secs(far, now=NOW) == RETRY_AFTER_CEILING_SECS
    # "-0000" parses without a zone; HTTP dates are GMT all the same.
    no_zone = email.utils.formatdate(NOW + 30, usegmt=True).replace("GMT", "-0000")
    assert retry_after_secs(no_zone, now=NOW) == 30.0


@pytest.mark.parametrize(
    "value",
    [None, "", "   ", "soon", "nan", "12 seconds", "Wed, 99 Foo 2015 07:28:00 GMT", "0x10", "1,5"],
)
def test_garbage_is_no_answer(value: str | None) -> None:
    assert retry_after_secs(value, now=NOW) is None


def test_header_parser_prefers_milliseconds_when_readable() -> None:
    assert parse_retry_after({"retry-after-ms": "250", "Retry-After": "9"}) == 0.25
    assert parse_retry_after({"retry-after-ms": "soon", "Retry-After": "9"}) == 9.0
    assert parse_retry_after({"retry-after-ms": "-5"}) == 0.0
    assert parse_retry_after({"retry-after-ms": "1e300"}) == RETRY_AFTER_CEILING_SECS
    assert parse_retry_after({}) is None


def test_backoff_grows_by_factor_up_to_the_cap() -> None:
    policy = Backoff(base_secs=1.0, cap_secs=100.0, factor=3.0)
    assert [policy.delay(n) for n in (1, 2, 3, 4, 5, 6)] == [1.0, 3.0, 9.0, 27.0, 81.0, 100.0]
    # No failure counted yet reads as the first.
    assert policy.delay(0) == 1.0


def test_backoff_survives_endless_failures() -> None:
    # 2.0 ** 5000 does not fit a float; the delay is simply the cap.
    assert Backoff(base_secs=1.0, cap_secs=300.0).delay(5000) == 300.0
    held = FailureBackoff()
    for _ in range(1100):
        delay = held.failed("s", NOW)
    assert delay == 86_400.0


def test_jitter_stretches_within_bounds_and_never_past_the_cap() -> None:
    policy = Backoff(base_secs=2.0, cap_secs=10.0, jitter=0.25)
    delays = {policy.delay(1) for _ in range(200)}
    assert all(2.0 <= d <= 2.5 for d in delays)
    assert len(delays) > 1
    assert {policy.delay(20) for _ in range(50)} == {10.0}


def test_retry_after_is_a_floor_capped_on_its_own() -> None:
    policy = Backoff(base_secs=1.0, cap_secs=300.0, retry_after_cap_secs=3600.0)
    assert policy.delay(1, retry_after=30.0) == 30.0
    assert policy.delay(5, retry_after=2.0) == 16.0
    assert policy.delay(1, retry_after=10**9) == 3600.0
    assert policy.delay(3, retry_after=-4.0) == 4.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base_secs": -1.0, "cap_secs": 1.0},
        {"base_secs": 1.0, "cap_secs": -1.0},
        {"base_secs": 1.0, "cap_secs": 1.0, "factor": 0.5},
        {"base_secs": 1.0, "cap_secs": 1.0, "jitter": -0.1},
        {"base_secs": 1.0, "cap_secs": 1.0, "retry_after_cap_secs": -1.0},
    ],
)
def test_nonsense_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Backoff(**kwargs)


def test_failure_backoff_holds_keys_until_their_time() -> None:
    held = FailureBackoff(Backoff(base_secs=10.0, cap_secs=40.0))
    assert held.failed("a", NOW) == 10.0
    assert held.failed("a", NOW) == 20.0
    assert held.held("a", NOW + 19) and not held.held("a", NOW + 20)
    assert held.all_held(NOW) == {"a"}
    held.succeeded("a")
    assert not held.held("a", NOW)
    assert held.failed("a", NOW) == 10.0


def test_model_retries_wait_at_least_the_backoff_and_what_the_server_asks() -> None:
    policy = RetryPolicy(max_retries=5, backoff_base=1.0, max_backoff=20.0)
    # A Retry-After shorter than the backoff no longer cuts it short.
    assert 4.0 <= policy.delay(2, retry_after=0.0) <= 4.4
    assert policy.delay(0, retry_after=7.0) == 7.0
    assert policy.delay(0, retry_after=600.0) == 20.0
