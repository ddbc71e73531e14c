"""The ``learning`` part of recall.json and recall.md (``--learn``).

Per conversation and overall: extraction calls, answers holding a JSON array, facts
stored and active, **answer coverage by facts** (share of judged questions whose
gold answer one active fact covers, :mod:`bench.recall.answers`), and the **effect**
of the facts in the same run: evidence recall and "answer words in the prompt" with
facts off (asked before extraction) and on (the same questions after it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from bench.recall.dataset import Conversation, category_name
from bench.recall.learn import JUDGED_CATEGORIES, answer_words
from bench.recall.rates import pct, rate
from bench.recall.replay import Asked, Replayed

COUNTS = (
    "sessions",
    "extraction_calls",
    "json_answers",
    "failed_calls",
    "facts_created",
    "facts_stored",
    "facts_active",
)


def _effect(asked: Sequence[Asked]) -> dict[str, Any]:
    off = {(a.index, a.mode): a for a in asked if not a.facts}
    on = {(a.index, a.mode): a for a in asked if a.facts}
    pairs = [(off[k], on[k]) for k in off if k in on]
    before = rate(a.hit for a, _ in pairs)
    after = rate(b.hit for _, b in pairs)
    change = None
    if before["recall"] is not None and after["recall"] is not None:
        change = round(100 * (after["recall"] - before["recall"]), 1)
    judged = [(a, b) for a, b in pairs if a.answer_in_prompt is not None]
    return {
        "evidence_recall_off": before,
        "evidence_recall_on": after,
        "evidence_recall_change_points": change,
        "questions_gained": sum(b.hit and not a.hit for a, b in pairs),
        "questions_lost": sum(a.hit and not b.hit for a, b in pairs),
        "answer_in_prompt_off": rate(bool(a.answer_in_prompt) for a, _ in judged),
        "answer_in_prompt_on": rate(bool(b.answer_in_prompt) for _, b in judged),
    }


def learning(
    convs: Sequence[Conversation], replays: Sequence[Replayed], modes: Sequence[str]
) -> dict[str, Any]:
    """The ``learning`` section of the results."""
    category = {(c.sample_id, q.index): q.category for c in convs for q in c.questions}
    unjudged = sum(
        q.category in JUDGED_CATEGORIES and answer_words(q) is None
        for c in convs
        for q in c.questions
    )
    totals: Counter[str] = Counter()
    per: dict[str, Any] = {}
    covered: dict[tuple[str, int], bool] = {}
    for r in replays:
        if r.learned is None:
            continue
        row = r.learned.row()
        row["answer_coverage"] = rate(r.learned.covered.values())
        per[r.sample_id] = row
        totals.update({k: row[k] for k in COUNTS})
        covered.update({(r.sample_id, i): v for i, v in r.learned.covered.items()})
    return {
        "overall": {
            **{k: totals[k] for k in COUNTS},
            "answer_coverage": rate(covered.values()),
            "answers_not_judged": unjudged,
        },
        "answer_coverage_by_category": {
            category_name(cat): rate(v for k, v in covered.items() if category[k] == cat)
            for cat in JUDGED_CATEGORIES
        },
        "by_conversation": per,
        "effect": {
            mode: {
                "overall": _effect([a for r in replays for a in r.asked if a.mode == mode]),
                "by_conversation": {
                    r.sample_id: _effect([a for a in r.asked if a.mode == mode]) for r in replays
                },
            }
            for mode in modes
        },
    }


def _counts_row(name: str, row: Mapping[str, Any]) -> str:
    return (
        f"| {name} | {row['sessions']} | {row['extraction_calls']} | {row['json_answers']}"
        f" | {row['failed_calls']} | {row['facts_stored']} | {row['facts_active']}"
        f" | {pct(row['answer_coverage'])} ({row['answer_coverage']['hits']}"
        f" of {row['answer_coverage']['n']}) |"
    )


def learning_markdown(doc: Mapping[str, Any]) -> list[str]:
    """The "Learned facts" part of recall.md."""
    learned = doc["learning"]
    model = doc["run"].get("learn_model", {})
    lines = ["", "## Learned facts", "", f"Extraction model: {model.get('describe', '?')}."]
    if model.get("fixture"):
        lines.append("**A scripted test fixture extracted these facts: no measurement.**")
    if model.get("kind") == "local":
        lines.append("Calls: at least (sessions read, or the answers PicoBot's log dropped).")
    lines += [
        "",
        "| conversation | sessions | extraction calls | JSON answers | failed calls "
        "| facts stored | facts active | answer covered by a fact |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for sid, row in learned["by_conversation"].items():
        lines.append(_counts_row(sid, row))
    lines.append(_counts_row("all", learned["overall"]))
    cats = learned["answer_coverage_by_category"]
    lines += [
        "",
        f"Answer coverage by category (categories 1-4; {learned['overall']['answers_not_judged']}"
        " answers without content words not judged): "
        + ", ".join(f"{name} {pct(entry)}" for name, entry in cats.items()),
        "",
        "Effect of the facts, same run, same questions (off: before extraction, on: after):",
        "",
        "| mode | evidence recall off | on | change (points) | gained / lost "
        "| answer words in prompt off | on |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for mode, entry in learned["effect"].items():
        e = entry["overall"]
        change = e["evidence_recall_change_points"]
        lines.append(
            f"| {mode} | {pct(e['evidence_recall_off'])} | {pct(e['evidence_recall_on'])}"
            f" | {'-' if change is None else f'{change:+.1f}'}"
            f" | {e['questions_gained']} / {e['questions_lost']}"
            f" | {pct(e['answer_in_prompt_off'])} | {pct(e['answer_in_prompt_on'])} |"
        )
    return lines
