"""The kinds of records in the recall index, told apart by their rowid alone.

``search_index`` rowids (see :mod:`picobot.store.retrieval.search`): a message's id (> 0); a
memory's ``-id``; a learned fact's ``-(2**40 + id)`` (m012); a session reflection's
``-(2**41 + id)`` and a digest's ``-(3 * 2**40 + id)`` (m015). A query keeps the kinds
it asks for with rowid ranges, which the index answers without reading a stored row.
"""

from __future__ import annotations

from picobot.store.migrations.facts import FACT_ROWID_BASE
from picobot.store.migrations.layers import DIGEST_ROWID_BASE, REFLECTION_ROWID_BASE

_RANGES = {
    "message": "rowid > 0",
    "memory": f"(rowid < 0 AND rowid >= -{FACT_ROWID_BASE})",
    "fact": f"(rowid < -{FACT_ROWID_BASE} AND rowid >= -{REFLECTION_ROWID_BASE})",
    "layer": f"rowid < -{REFLECTION_ROWID_BASE}",
}


def kind_of(rowid: int) -> tuple[str, int]:
    """The kind and source row id of an index rowid."""
    if rowid > 0:
        return "message", rowid
    if rowid < -DIGEST_ROWID_BASE:
        return "digest", -rowid - DIGEST_ROWID_BASE
    if rowid < -REFLECTION_ROWID_BASE:
        return "reflection", -rowid - REFLECTION_ROWID_BASE
    if rowid < -FACT_ROWID_BASE:
        return "fact", -rowid - FACT_ROWID_BASE
    return "memory", -rowid


def rowid_filter(*, memories: bool, facts: bool, layers: bool, messages: bool = True) -> str:
    """The condition keeping the asked-for kinds ("" keeps everything)."""
    if messages and memories and not facts and not layers:
        return f"rowid >= -{FACT_ROWID_BASE}"  # messages and memories, one range
    wanted = {"message": messages, "memory": memories, "fact": facts, "layer": layers}
    if not any(wanted.values()):
        return "1 = 0"
    if all(wanted.values()):
        return ""
    if list(wanted.values()) == [True, False, False, False]:
        return _RANGES["message"]
    return "(" + " OR ".join(_RANGES[k] for k, on in wanted.items() if on) + ")"


def joins(*, facts: bool, layers: bool) -> tuple[str, str, str, str, str]:
    """SQL pieces naming the source rows of fact and layer hits (``h.id`` is the rowid).

    (extra text and time alternatives, the session and role expressions, the joins);
    nothing of a kind not asked for: the tables exist only from their migrations on.
    """
    text = time = join = ""
    session, role = "m.session_id", "m.role"
    if facts:
        text += ", COALESCE(picobot_open(f.subject) || ': ', '') || picobot_open(f.text)"
        time += ", f.updated_at"
        join += (
            f" LEFT JOIN facts f ON h.id < -{FACT_ROWID_BASE} AND h.id >= -{REFLECTION_ROWID_BASE}"
            f" AND f.id = -h.id - {FACT_ROWID_BASE}"
        )
    if layers:
        text += ", picobot_open(d.text)"
        time += ", d.updated_at"
        session = "COALESCE(m.session_id, d.session_id)"
        role = (
            "COALESCE(m.role, CASE WHEN d.level = 0 THEN 'reflection'"
            " WHEN d.id IS NOT NULL THEN 'digest' END)"
        )
        join += (
            f" LEFT JOIN digests d ON h.id < -{REFLECTION_ROWID_BASE} AND d.id = -h.id -"
            f" (CASE WHEN h.id < -{DIGEST_ROWID_BASE} THEN {DIGEST_ROWID_BASE}"
            f" ELSE {REFLECTION_ROWID_BASE} END)"
        )
    return text, time, session, role, join
