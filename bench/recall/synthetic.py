"""A small LoCoMo-format conversation set with planted facts, for tests and smoke runs.

``python -m bench.recall.synthetic OUT.json [--conversations N] [--sessions N]``

Each conversation has two speakers, dated sessions of filler chat, and facts planted
in known turns, with questions whose evidence is those turns:

- ``rare``: a single-hop fact with a rare word (an axolotl's name): keyword search
  finds it;
- ``multihop``: two turns in different sessions about the same class;
- ``temporal``: a dated event;
- ``window``: a fact in the very last turn, which a continuation sees in its window;
- ``unfindable``: a question sharing no word with its evidence turn (nor with any
  other), so no keyword recall can find it: the metric has to count it as a miss;
- ``adversarial``: a question about something never said, its evidence a near miss;
- one question without evidence and one naming a turn that does not exist, which the
  loader must skip and count.

The filler never uses the planted words. :data:`KINDS` maps each question's
``qa`` position to its kind, for tests.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

NAMES = [("Avery", "Blake"), ("Corin", "Dale"), ("Emery", "Flynn"), ("Gale", "Harper")]
FILLER_TOPICS = [
    "the weather this weekend",
    "a new coffee place downtown",
    "my work schedule",
    "a movie I watched",
    "cooking pasta for dinner",
    "a long walk in the park",
    "cleaning the apartment",
    "a podcast about history",
    "my neighbor's noisy dog",
    "planning a small birthday party",
]
FILLER_FORMS = [
    "I spent some time on {t} and it felt good.",
    "Have you thought about {t}? I keep coming back to it.",
    "Honestly, {t} took most of my afternoon.",
    "Funny you say that, {t} was on my mind too.",
    "I told my friend about {t} and we laughed a lot.",
]
KINDS = (
    "rare",
    "multihop",
    "temporal",
    "window",
    "unfindable",
    "adversarial",
    "no_evidence",
    "unresolved",
)


def _filler(rng: random.Random) -> str:
    return rng.choice(FILLER_FORMS).format(t=rng.choice(FILLER_TOPICS))


def _date(session: int) -> str:
    return f"{9 + session % 3}:{15 * (session % 4):02d} am on {3 + 7 * session} March, 2024"


def conversation(n: int, *, sessions: int = 4, turns: int = 8, seed: int = 0) -> dict[str, Any]:
    """Conversation ``n`` (0-based) in LoCoMo format; see the module docstring."""
    if sessions < 4 or turns < 6:
        raise ValueError("at least 4 sessions of 6 turns: facts go in sessions 1, 2 and 3")
    rng = random.Random(f"{seed}:{n}")
    a, b = NAMES[n % len(NAMES)]
    planted: dict[tuple[int, int], str] = {
        (1, 2): f"My new pet axolotl is named Quillfeather, {a}. He lives by the window.",
        (1, 4): "I signed up for a pottery class at the Marlowe studio on Tuesdays.",
        (1, 5): "She handed me an old brass compass before she left.",
        (2, 3): "Yesterday I finally ran the Harbor City marathon, four hours flat!",
        (3, 4): "The Marlowe pottery teacher wants three of my glazed vases for a show.",
        (sessions, turns): "By the way, my sister just moved to Lisbon for a job.",
    }
    conv: dict[str, Any] = {"speaker_a": a, "speaker_b": b}
    for s in range(1, sessions + 1):
        session = []
        for t in range(1, turns + 1):
            speaker = a if t % 2 else b
            text = planted.get((s, t), _filler(rng))
            turn: dict[str, Any] = {"speaker": speaker, "dia_id": f"D{s}:{t}", "text": text}
            if (s, t) == (2, 3):
                turn["blip_caption"] = "a photo of a runner crossing a finish line"
            session.append(turn)
        conv[f"session_{s}_date_time"] = _date(s)
        conv[f"session_{s}"] = session
    # LoCoMo files carry dates of sessions that have no turns; the loader skips them.
    conv[f"session_{sessions + 1}_date_time"] = _date(sessions + 1)
    last = f"D{sessions}:{turns}"
    last_speaker = a if turns % 2 else b
    qa = [
        _qa(f"What is the name of {b}'s pet axolotl?", "Quillfeather", ["D1:2"], 4),
        _qa(
            f"What will {b} show from the pottery class at Marlowe?",
            "glazed vases",
            ["D1:4; D3:4"],
            1,
        ),
        _qa(f"When did {a} run the Harbor City marathon?", "the day before", ["D2:3"], 2),
        _qa(f"Where did {last_speaker}'s sister move for a job?", "Lisbon", [last], 4),
        _qa("Which heirloom was passed down by the grandmother?", "a compass", ["D1:5"], 3),
        _qa(f"What is the name of {a}'s pet iguana?", None, ["D1:2"], 5),
        _qa("What did they talk about?", "small talk", [], 3),
        _qa("Which day is the pottery class?", "Tuesday", [f"D{sessions + 5}:1"], 4),
    ]
    return {"sample_id": f"syn-{n + 1}", "conversation": conv, "qa": qa}


def _qa(question: str, answer: str | None, evidence: list[str], category: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"question": question, "evidence": evidence, "category": category}
    if category == 5:
        entry["adversarial_answer"] = "not mentioned"
    else:
        entry["answer"] = answer
    return entry


def generate(
    conversations: int = 2, *, sessions: int = 4, turns: int = 8, seed: int = 0
) -> list[dict[str, Any]]:
    """A LoCoMo-format file's content: ``conversations`` conversations."""
    return [
        conversation(n, sessions=sessions, turns=turns, seed=seed) for n in range(conversations)
    ]


def write(path: Path, conversations: int = 2, *, sessions: int = 4, turns: int = 8) -> Path:
    """Write a generated set to ``path``."""
    data = generate(conversations, sessions=sessions, turns=turns)
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: write a synthetic set."""
    parser = argparse.ArgumentParser(prog="python -m bench.recall.synthetic", description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--conversations", type=int, default=2)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--turns", type=int, default=8)
    args = parser.parse_args(argv)
    write(args.out, args.conversations, sessions=args.sessions, turns=args.turns)
    return 0


if __name__ == "__main__":
    sys.exit(main())
