"""LoCoMo-format files: load, check, and turn into what the replay needs.

A file is a JSON list of conversations, each an object with ``conversation``
(``speaker_a``, ``speaker_b``, ``session_N`` turn lists with ``session_N_date_time``)
and ``qa`` (``question``, ``category``, ``evidence`` = the ``dia_id``\\ s of the turns
that hold the answer). A turn has ``speaker``, ``dia_id``, ``text`` and optionally
``blip_caption`` (a photo it shares). Anything else in the file is ignored.

A malformed file is refused with one :class:`LocomoError` naming where it is wrong
(``conversation 2 (conv-2): session_4[7].text: expected a string``). Questions the
metric cannot judge are kept out and counted, never guessed at:

- ``no_evidence``: an empty ``evidence`` list;
- ``unresolved_evidence``: an evidence id that names no turn of the conversation
  (a typo such as ``D`` or a turn that does not exist).

An evidence entry holding several ids (``"D1:4; D3:4"``) is split on ``;``, ``,``
and spaces.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
"""LoCoMo's question categories."""

_SESSION_KEY = re.compile(r"session_(\d+)")
_EVIDENCE_SPLIT = re.compile(r"[;,\s]+")


class LocomoError(ValueError):
    """The file cannot be read as LoCoMo; the message says where and why."""


def category_name(category: int) -> str:
    """``"1 multi-hop"``, or ``"7"`` for a category LoCoMo does not define."""
    name = CATEGORIES.get(category)
    return f"{category} {name}" if name else str(category)


@dataclass(frozen=True, slots=True)
class Turn:
    """One utterance of a session."""

    dia_id: str
    speaker: str
    text: str
    caption: str | None = None

    def message(self) -> str:
        """The chat message the replay sends for this turn: speaker first, photo last."""
        photo = f" [shares a photo: {self.caption}]" if self.caption else ""
        return f"{self.speaker}: {self.text}{photo}"


@dataclass(frozen=True, slots=True)
class Session:
    """One dated session of a conversation."""

    number: int
    date_time: str
    turns: tuple[Turn, ...]


@dataclass(frozen=True, slots=True)
class Question:
    """A question with the turns that answer it (``evidence``, resolved ids)."""

    index: int
    """Position in the conversation's ``qa`` list."""
    text: str
    category: int
    evidence: tuple[str, ...]
    answer: str | None = None
    """The gold ``answer`` as text (a number is written out); None when the file has
    none (LoCoMo's adversarial questions carry ``adversarial_answer`` instead)."""


@dataclass(frozen=True, slots=True)
class Conversation:
    """One conversation: sessions in order, the questions the metric can judge."""

    sample_id: str
    speakers: tuple[str, str]
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]
    skipped: dict[str, list[int]] = field(default_factory=dict)
    """Reason -> indexes in ``qa`` of the questions left out."""

    def turns(self) -> dict[str, Turn]:
        """Every turn by its ``dia_id``."""
        return {t.dia_id: t for s in self.sessions for t in s.turns}

    @property
    def turn_count(self) -> int:
        """How many turns the replay sends."""
        return sum(len(s.turns) for s in self.sessions)


def _need(value: Any, kind: type | tuple[type, ...], where: str, what: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool):
        raise LocomoError(f"{where}: expected {what}, found {type(value).__name__}")
    return value


def _parse_turn(raw: Any, where: str) -> Turn:
    _need(raw, dict, where, "an object")
    for key in ("speaker", "dia_id", "text"):
        if key not in raw:
            raise LocomoError(f"{where}: missing {key!r}")
        _need(raw[key], str, f"{where}.{key}", "a string")
    caption = raw.get("blip_caption")
    if caption is not None:
        _need(caption, str, f"{where}.blip_caption", "a string")
    if not raw["dia_id"].strip():
        raise LocomoError(f"{where}.dia_id: empty")
    return Turn(raw["dia_id"].strip(), raw["speaker"], raw["text"], caption or None)


def _parse_sessions(conv: dict[str, Any], where: str) -> tuple[Session, ...]:
    sessions = []
    for key, value in conv.items():
        match = _SESSION_KEY.fullmatch(key)
        if match is None:
            continue
        spot = f"{where}: {key}"
        _need(value, list, spot, "a list of turns")
        date = conv.get(f"{key}_date_time", "")
        _need(date, str, f"{spot}_date_time", "a string")
        turns = tuple(_parse_turn(t, f"{spot}[{i}]") for i, t in enumerate(value))
        if turns:
            sessions.append(Session(int(match.group(1)), date, turns))
    if not sessions:
        raise LocomoError(f"{where}: no session_N with turns in 'conversation'")
    sessions.sort(key=lambda s: s.number)
    seen: dict[str, int] = {}
    for session in sessions:
        for turn in session.turns:
            if turn.dia_id in seen:
                raise LocomoError(
                    f"{where}: dia_id {turn.dia_id!r} appears in session_{seen[turn.dia_id]}"
                    f" and session_{session.number}"
                )
            seen[turn.dia_id] = session.number
    return tuple(sessions)


def _answer(value: Any) -> str | None:
    """A gold answer as text: strings as they are, numbers written out, else None."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def _parse_questions(
    qa: Any, turns: set[str], where: str
) -> tuple[tuple[Question, ...], dict[str, list[int]]]:
    _need(qa, list, f"{where}: qa", "a list")
    questions: list[Question] = []
    skipped: dict[str, list[int]] = {"no_evidence": [], "unresolved_evidence": []}
    for i, raw in enumerate(qa):
        spot = f"{where}: qa[{i}]"
        _need(raw, dict, spot, "an object")
        if "question" not in raw:
            raise LocomoError(f"{spot}: missing 'question'")
        text = _need(raw["question"], str, f"{spot}.question", "a string")
        category = _need(raw.get("category"), int, f"{spot}.category", "an integer")
        evidence = _need(raw.get("evidence", []), list, f"{spot}.evidence", "a list")
        ids: list[str] = []
        for j, entry in enumerate(evidence):
            _need(entry, str, f"{spot}.evidence[{j}]", "a string")
            ids += [token for token in _EVIDENCE_SPLIT.split(entry) if token]
        if not ids:
            skipped["no_evidence"].append(i)
        elif any(token not in turns for token in ids):
            skipped["unresolved_evidence"].append(i)
        else:
            questions.append(
                Question(i, text, category, tuple(dict.fromkeys(ids)), _answer(raw.get("answer")))
            )
    return tuple(questions), skipped


def parse(data: Any, source: str = "<data>") -> list[Conversation]:
    """Conversations from decoded JSON; :class:`LocomoError` names what is wrong."""
    _need(data, list, source, "a JSON list of conversations")
    if not data:
        raise LocomoError(f"{source}: the list of conversations is empty")
    out = []
    ids: set[str] = set()
    for n, raw in enumerate(data, 1):
        _need(raw, dict, f"{source}: conversation {n}", "an object")
        sample_id = raw.get("sample_id", f"conv-{n}")
        _need(sample_id, str, f"{source}: conversation {n}.sample_id", "a string")
        where = f"{source}: conversation {n} ({sample_id})"
        if sample_id in ids:
            raise LocomoError(f"{where}: sample_id used twice")
        ids.add(sample_id)
        if "conversation" not in raw:
            raise LocomoError(f"{where}: missing 'conversation'")
        conv = _need(raw["conversation"], dict, f"{where}: conversation", "an object")
        speakers = []
        for key in ("speaker_a", "speaker_b"):
            speakers.append(_need(conv.get(key), str, f"{where}: conversation.{key}", "a string"))
        sessions = _parse_sessions(conv, where)
        turn_ids = {t.dia_id for s in sessions for t in s.turns}
        questions, skipped = _parse_questions(raw.get("qa"), turn_ids, where)
        out.append(
            Conversation(sample_id, (speakers[0], speakers[1]), sessions, questions, skipped)
        )
    return out


def load(path: Path) -> list[Conversation]:
    """Read and check a LoCoMo-format file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LocomoError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LocomoError(f"{path}: cannot read it ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LocomoError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    return parse(data, str(path))


def select(
    conversations: Sequence[Conversation],
    *,
    max_conversations: int | None = None,
    max_questions: int | None = None,
    seed: int = 0,
) -> list[Conversation]:
    """The first ``max_conversations``, each with at most ``max_questions`` questions.

    The questions kept are a sample drawn with ``seed`` and the conversation's id, in
    file order, so a quick run asks the same questions every time.
    """
    chosen = list(conversations[:max_conversations] if max_conversations else conversations)
    if max_questions is None:
        return chosen
    out = []
    for conv in chosen:
        if len(conv.questions) <= max_questions:
            out.append(conv)
            continue
        rng = random.Random(f"{seed}:{conv.sample_id}")
        keep = sorted(rng.sample(range(len(conv.questions)), max_questions))
        questions = tuple(conv.questions[i] for i in keep)
        out.append(
            Conversation(conv.sample_id, conv.speakers, conv.sessions, questions, conv.skipped)
        )
    return out
