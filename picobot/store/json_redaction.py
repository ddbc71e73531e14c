"""Redaction of a JSON document's strings, for the text the store redacts.

A tool call's arguments are JSON, whose escapes hide secrets from the text rules of
the redactor (:attr:`Database.redact`), so each string is redacted on its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from picobot.errors import UNREADABLE_JSON


def redact_json(text: str, redact: Callable[[str], str]) -> str:
    """``text`` (a tool call's JSON arguments, say) with the secrets in it redacted.

    JSON escapes hide secrets from the text rules: a quoted value is written ``\\"...\\"``
    and a line break ``\\n``, so neither ``"password": "x"`` nor a ``password: x`` line
    inside a JSON string looks like one. So each string of the document (keys too) is
    redacted on its own and, only if one changed, the document is written out again;
    the result is then redacted as text as well (for a label that is a key, with its
    value). Text that is not JSON is redacted as text.
    """
    try:
        doc = json.loads(text)
        cleaned = _redact_strings(doc, redact)
    except UNREADABLE_JSON:
        return redact(text)
    if cleaned != doc:
        text = json.dumps(cleaned, ensure_ascii=False)
    return redact(text)


def _redact_strings(value: object, redact: Callable[[str], str]) -> object:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_redact_strings(item, redact) for item in value]
    if isinstance(value, dict):
        return {redact(key): _redact_strings(item, redact) for key, item in value.items()}
    return value
