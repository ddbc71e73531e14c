"""Request-derived values in log lines, and collapsed repeats."""

from __future__ import annotations

import logging

import pytest

from picobot.logsafe import LogSummary, loggable


@pytest.mark.parametrize(
    ("raw", "logged"),
    [
        ("/api/v1/x\n2026 INFO purge executed", "/api/v1/x\\x0a2026 INFO purge executed"),
        ("a\r\nb", "a\\x0d\\x0ab"),
        ("\x1b[31mred", "\\x1b[31mred"),  # terminal escapes
        ("a\u2028b\u2029c\x85d", "a\\u2028b\\u2029c\\x85d"),  # what splitlines() splits on
        ("evil\u202etxt.exe", "evil\\u202etxt.exe"),  # a bidi override
        ("bad\udcffbyte", "bad\\udcffbyte"),  # an undecodable header byte
        ("C:\\x0a", "C:\\\\x0a"),  # a literal backslash cannot pass for an escape
        ("café ✓ 東京", "café ✓ 東京"),  # printable text is kept
    ],
)
def test_loggable_escapes_what_could_break_or_fake_a_line(raw: str, logged: str) -> None:
    assert loggable(raw) == logged
    assert loggable(raw).splitlines() == [loggable(raw)]
    loggable(raw).encode("utf-8")  # a UTF-8 log file can write it


def test_loggable_cuts_long_values() -> None:
    assert loggable("x" * 500) == "x" * 200 + "..."
    assert loggable("ab", limit=1) == "a..."


async def test_log_summary_logs_the_first_then_a_count_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("tests.logsafe")
    summary = LogSummary(log, "refusals", interval_secs=3600)
    with caplog.at_level(logging.INFO, logger="tests.logsafe"):
        for n in range(100):
            summary.note("10.0.0.1", "refused %s (%d)", "10.0.0.1", n)
        summary.note("10.0.0.2", "refused %s (%d)", "10.0.0.2", 0)
        summary.close()
        summary.close()  # nothing pending twice
    assert [r.getMessage() for r in caplog.records] == [
        "refused 10.0.0.1 (0)",
        "refused 10.0.0.2 (0)",
        "refusals: 99 more from 10.0.0.1 in the last 3600s",
    ]


async def test_log_summary_keeps_bounded_state_for_a_flood_of_keys(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("tests.logsafe")
    summary = LogSummary(log, "refusals", interval_secs=3600, max_keys=3)
    with caplog.at_level(logging.INFO, logger="tests.logsafe"):
        for n in range(1000):
            summary.note(f"peer-{n}", "refused %s", n)
        summary.close()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "refused 0",
        "refused 1",
        "refused 2",
        "refused 3",  # the first of the shared "other" window
        "refusals: 996 more from other in the last 3600s",
    ]
