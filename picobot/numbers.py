"""Whole numbers typed by people or sent by clients: plain ASCII digits, bounded.

``str.isdigit`` also accepts characters such as ``²`` or ``٣`` (which ``int`` refuses
or reads differently), and a number of more than 18 digits overflows SQLite's 64-bit
integers: every id, offset or count read from text goes through :func:`parse_digits`.
"""

from __future__ import annotations

MAX_DIGITS = 18
"""Most digits a number may have (every 18-digit number fits SQLite's integers)."""


def parse_digits(raw: str, max_digits: int = MAX_DIGITS) -> int | None:
    """``raw`` as a whole number if it is 1 to ``max_digits`` ASCII digits, else None.

    No sign, space or other character is accepted; callers strip what they allow and
    answer None with their own clear error.
    """
    if not 0 < len(raw) <= max_digits or not raw.isascii() or not raw.isdigit():
        return None
    return int(raw)
