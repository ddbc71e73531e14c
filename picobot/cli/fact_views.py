"""How ``picobot facts`` prints facts: one line each, or JSON (see docs/cli.md)."""

from __future__ import annotations

from collections.abc import Sequence

from picobot.cli.common import EXIT_OK, iso, print_json, record_json
from picobot.commands.facts import fact_text
from picobot.store.learned.facts import Fact, FactChange, FactSource


def print_listing(found: Sequence[Fact], *, as_json: bool) -> int:
    """Print facts grouped by user, most confident first."""
    if as_json:
        print_json({"facts": [record_json(f, times=("created_at", "updated_at")) for f in found]})
        return EXIT_OK
    if not found:
        print("no facts")
    user = None
    for fact in found:
        if fact.user_id != user:
            user = fact.user_id
            print(f"{user}:")
        print(f"  {fact_text(fact)}")
    return EXIT_OK


def _change(change: FactChange) -> str:
    parts = [f"{iso(change.at)} {change.reason}"]
    if change.old_confidence is not None or change.new_confidence is not None:
        parts.append(f"confidence {change.old_confidence} -> {change.new_confidence}")
    if change.old_active is not None and change.old_active != change.new_active:
        parts.append("activated" if change.new_active else "deactivated")
    if change.new_text is not None:
        was = f" (was: {change.old_text})" if change.old_text else ""
        parts.append(f"text: {change.new_text}{was}")
    if change.session_id:
        parts.append(f"session {change.session_id}")
    if change.actor:
        parts.append(f"by {change.actor}")
    return "; ".join(parts)


def print_fact(
    fact: Fact,
    sources: Sequence[FactSource] | None,
    history: Sequence[FactChange] | None,
    *,
    as_json: bool,
) -> int:
    """Print one fact, with its sources and history when given."""
    if as_json:
        value = record_json(fact, times=("created_at", "updated_at"))
        if sources is not None:
            value["sources"] = [record_json(s, times=("created_at",)) for s in sources]
        if history is not None:
            value["history"] = [record_json(h, times=("at",)) for h in history]
        print_json({"fact": value})
        return EXIT_OK
    print(f"{fact.user_id}: {fact_text(fact)}")
    print(f"  created {iso(fact.created_at)}, updated {iso(fact.updated_at)}")
    for source in sources or ():
        where = f"session {source.session_id}" if source.session_id else "an operator"
        message = f", message {source.message_id}" if source.message_id is not None else ""
        print(f"  learned from {where}{message} at {iso(source.created_at)}")
    for change in history or ():
        print(f"  {_change(change)}")
    return EXIT_OK
