"""Rates as the results write them (``{"recall", "hits", "n"}``) and print them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def rate(flags: Iterable[bool]) -> dict[str, Any]:
    """``{"recall", "hits", "n"}``; recall is None without questions."""
    values = list(flags)
    hits = sum(values)
    return {
        "recall": round(hits / len(values), 4) if values else None,
        "hits": hits,
        "n": len(values),
    }


def pct(entry: Mapping[str, Any] | None) -> str:
    """A rate as ``"56.8%"``, ``"-"`` without questions."""
    if not entry or entry.get("recall") is None:
        return "-"
    return f"{100 * entry['recall']:.1f}%"
