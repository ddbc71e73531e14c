"""Figures from the judged questions: recall.json and recall.md.

Neither holds any text of the evaluated file (questions, turns): only ids, counts and
rates, so a result can be shared whatever the data's license.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.recall.dataset import CATEGORIES, Conversation, category_name
from bench.recall.learn_report import learning, learning_markdown
from bench.recall.metric import distribution
from bench.recall.rates import pct, rate
from bench.recall.replay import Asked, Replayed

Key = tuple[str, int]
"""(sample_id, qa index)"""
ANSWERABLE = (1, 2, 3, 4)
"""The categories the targets are set on (5, adversarial, has no answer to find)."""


def halves(convs: Sequence[Conversation]) -> tuple[list[str], list[str]]:
    """The conversations tuned on (the first half, in file order) and those checked on
    (the rest): a change that only fits the first half shows as a gap."""
    ids = [c.sample_id for c in convs]
    cut = (len(ids) + 1) // 2
    return ids[:cut], ids[cut:]


def breakdown(hits: Mapping[Key, bool], convs: Sequence[Conversation]) -> dict[str, Any]:
    """Overall, categories 1-4, per category, per half of the split, per conversation."""
    category = {(c.sample_id, q.index): q.category for c in convs for q in c.questions}
    cats = sorted({category[k] for k in hits})
    tune, check = halves(convs)

    def answerable(ids: Sequence[str]) -> dict[str, Any]:
        return rate(v for k, v in hits.items() if category[k] in ANSWERABLE and k[0] in ids)

    return {
        "overall": rate(hits.values()),
        "answerable": answerable([c.sample_id for c in convs]),
        "split": {"tune": answerable(tune), "check": answerable(check)},
        "by_category": {
            category_name(cat): rate(v for k, v in hits.items() if category[k] == cat)
            for cat in cats
        },
        "by_conversation": {
            c.sample_id: rate(v for k, v in hits.items() if k[0] == c.sample_id) for c in convs
        },
    }


def mode_details(asked: Sequence[Asked]) -> dict[str, Any]:
    """Tokens, where evidence was found, and the checks, for one mode."""
    found = [where for a in asked for where in a.found.values()]
    judged = [a.answer_in_prompt for a in asked if a.answer_in_prompt is not None]
    return {
        "prompt_tokens": distribution([a.prompt_tokens for a in asked]),
        "recalled_block_tokens": distribution([a.recalled_tokens for a in asked]),
        "recalled_block_present": rate(a.recalled_items > 0 for a in asked),
        "recalled_records": distribution([a.recalled_items for a in asked]),
        "evidence_turns": {
            "n": len(found),
            "found": sum(w is not None for w in found),
            "in_recalled_block": found.count("recalled"),
            "in_window": found.count("window"),
            "in_facts": found.count("facts"),
            "elsewhere": found.count("other"),
        },
        "answer_in_prompt": rate(judged),
        "duplicate_recalled_records": sum(a.duplicate_items for a in asked),
        "questions_with_duplicates": sum(a.duplicate_items > 0 for a in asked),
        "purge_residue": (
            sum(a.residue for a in asked if a.residue is not None)
            if any(a.residue is not None for a in asked)
            else None
        ),
        "prefix_share": distribution([a.prefix_share for a in asked if a.prefix_share is not None]),
    }


def build(
    convs: Sequence[Conversation],
    replays: Sequence[Replayed],
    baselines: Mapping[str, Mapping[Key, bool]],
    modes: Sequence[str],
    run: Mapping[str, Any],
) -> dict[str, Any]:
    """The whole result document."""
    systems: dict[str, Any] = {}
    details: dict[str, Any] = {}
    learned = any(r.learned is not None for r in replays)
    for mode, facts in [(m, f) for f in (False, True)[: 1 + learned] for m in modes]:
        label = f"{mode} + facts" if facts else mode
        asked = [a for r in replays for a in r.asked if a.mode == mode and a.facts == facts]
        hits = {(r.sample_id, a.index): a.hit for r in replays for a in r.asked if a in asked}
        systems[f"picobot ({label})"] = breakdown(hits, convs)
        details[label] = mode_details(asked)
    for name, flags in baselines.items():
        systems[name] = breakdown(flags, convs)
    tune, check = halves(convs)
    return {
        "run": {**run, "split": {"tune": tune, "check": check}},
        "systems": systems,
        "modes": details,
        **({"learning": learning(convs, replays, modes)} if learned else {}),
        "conversations": [
            {
                "sample_id": c.sample_id,
                "sessions": len(c.sessions),
                "turns": c.turn_count,
                "questions": len(c.questions),
                "skipped": {k: len(v) for k, v in c.skipped.items()},
                "seconds": r.seconds,
                "background_model_calls": r.background_calls,
                "turns_stored_changed": r.changed_turns,
                **({"learning": r.learned.row()} if r.learned is not None else {}),
            }
            for c, r in zip(convs, replays, strict=True)
        ],
        "questions": [
            {
                "sample_id": r.sample_id,
                **a.row(),
                **({"answer_covered_by_fact": r.learned.covered.get(a.index)} if r.learned else {}),
            }
            for r in replays
            for a in r.asked
        ],
        "baseline_questions": [
            {
                "sample_id": c.sample_id,
                "qa_index": q.index,
                "category": q.category,
                **{name: flags[(c.sample_id, q.index)] for name, flags in baselines.items()},
            }
            for c in convs
            for q in c.questions
        ],
    }


def markdown(doc: Mapping[str, Any]) -> str:
    """recall.md: the tables people read."""
    run = doc["run"]
    systems = doc["systems"]
    cats = [category_name(c) for c in CATEGORIES]
    first = next(iter(systems.values()))
    lines = [
        "# PicoBot recall evaluation",
        "",
        f"`{run['file_name']}` (sha256 {run['file_sha256'][:12]}), "
        f"{len(doc['conversations'])} conversations, {run['questions']} questions judged "
        f"(skipped: {run['skipped']['no_evidence']} without evidence, "
        f"{run['skipped']['unresolved_evidence']} with evidence naming no turn); "
        f"commit {run['commit']}; {run['wall_seconds']:.0f} s. See docs/eval.md.",
        "",
        "Evidence recall: share of questions whose evidence turns are all in the prompt.",
        "",
        "| system | 1-4 | 1-4 tune | 1-4 check | all | " + " | ".join(cats) + " |",
        "| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in cats) + " |",
    ]
    counts = [str(first["by_category"].get(c, {}).get("n", 0)) for c in cats]
    split = first["split"]
    lines.append(
        f"| questions | {first['answerable']['n']} | {split['tune']['n']}"
        f" | {split['check']['n']} | {first['overall']['n']} | " + " | ".join(counts) + " |"
    )
    for name, entry in systems.items():
        row = [pct(entry["by_category"].get(c)) for c in cats]
        split = entry["split"]
        lines.append(
            f"| {name} | {pct(entry['answerable'])} | {pct(split['tune'])}"
            f" | {pct(split['check'])} | {pct(entry['overall'])} | " + " | ".join(row) + " |"
        )
    tune, check = halves_of(doc)
    lines += [
        "",
        f"1-4: categories 1-4 (the answerable ones). Tune: {', '.join(tune) or '-'};"
        f" check: {', '.join(check) or '-'}.",
    ]
    lines += [
        "",
        "Prompt tokens (estimated, ceil(chars/4) + 4 per message) of the call answering each"
        " question:",
        "",
        "| mode | prompt median | prompt p95 | recalled block median | recalled block p95 "
        "| with a recalled block | evidence turns found: recalled / window / facts / elsewhere "
        "| prefix share median / mean | purge residue |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for mode, d in doc["modes"].items():
        p, r, ev = d["prompt_tokens"], d["recalled_block_tokens"], d["evidence_turns"]
        share = d.get("prefix_share", {})
        residue = d["purge_residue"]
        lines.append(
            f"| {mode} | {p.get('median', '-')} | {p.get('p95', '-')} | {r.get('median', '-')}"
            f" | {r.get('p95', '-')} | {pct(d['recalled_block_present'])}"
            f" | {ev['in_recalled_block']} / {ev['in_window']} / {ev['in_facts']}"
            f" / {ev['elsewhere']} of {ev['n']}"
            f" | {share.get('median', '-')} / {share.get('mean', '-')}"
            f" | {'-' if residue is None else residue} |"
        )
    names = list(systems)
    lines += [
        "",
        "Per conversation:",
        "",
        "| conversation | turns | questions | " + " | ".join(names) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in names) + " |",
    ]
    for conv in doc["conversations"]:
        sid = conv["sample_id"]
        row = [pct(systems[n]["by_conversation"].get(sid)) for n in names]
        lines.append(f"| {sid} | {conv['turns']} | {conv['questions']} | " + " | ".join(row) + " |")
    if "learning" in doc:
        lines += learning_markdown(doc)
    return "\n".join(lines) + "\n"


def halves_of(doc: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The tune and check conversations of a result document."""
    ids = [c["sample_id"] for c in doc["conversations"]]
    cut = (len(ids) + 1) // 2
    return ids[:cut], ids[cut:]


def write(doc: Mapping[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """Write recall.json and recall.md into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    js, md = out_dir / "recall.json", out_dir / "recall.md"
    js.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    md.write_text(markdown(doc), encoding="utf-8")
    return js, md
