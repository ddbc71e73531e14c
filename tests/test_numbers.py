"""The one parser of whole numbers from text: ASCII digits only, at most 18 of them."""

from __future__ import annotations

import pytest

from picobot.numbers import MAX_DIGITS, parse_digits


@pytest.mark.parametrize(
    ("raw", "value"),
    [("0", 0), ("7", 7), ("0042", 42), ("9" * MAX_DIGITS, int("9" * MAX_DIGITS))],
)
def test_plain_digits_are_read(raw: str, value: int) -> None:
    assert parse_digits(raw) == value


@pytest.mark.parametrize(
    "raw",
    ["", "²", "1²", "\u0663", "\uff11", "1" * 25, "9" * (MAX_DIGITS + 1), "-1", "+1", " 1", "1.0"],
)
def test_anything_else_is_refused(raw: str) -> None:
    assert parse_digits(raw) is None


def test_a_caller_may_allow_fewer_digits() -> None:
    assert parse_digits("12345", 5) == 12345
    assert parse_digits("123456", 5) is None
