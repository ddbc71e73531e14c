"""Untrusted text inside ``<data>`` blocks must not be able to leave its block.

Stored messages, memories, summaries and tool output reach the model inside
``<data ...>`` blocks that it is told to treat as information, never as instructions.
Any tag in such a text that could close its block or open another one, in any case
and spacing (``</data>``, ``</DATA >``, ``< /Data>``, ``<data``), has its ``<``
written as ``&lt;``: what is left is no tag for a parser, however lenient, and reads
as quoted markup to a model.
"""

from __future__ import annotations

import re

_TAG = re.compile(r"<(\s*/?\s*data\b)", re.IGNORECASE)


def escape_data(text: str) -> str:
    """``text`` with every opening or closing ``data`` tag neutralized."""
    # Most texts hold no '<' at all; the test is ten times cheaper than the search.
    return _TAG.sub(r"&lt;\1", text) if "<" in text else text


def one_line(text: str) -> str:
    """``text`` on one line, runs of whitespace as one space: a list item that cannot
    start a line of its own (and pose as another item)."""
    return " ".join(text.split())
