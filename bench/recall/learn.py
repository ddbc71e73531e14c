"""``--learn``: facts extracted by a real model through PicoBot's command line.

After a conversation was replayed and its questions asked (facts off), its server is
stopped and ``python -m picobot --config F facts extract --user ws:TAG`` runs on the
conversation's data dir, ``[llm]`` pointed at the extraction model:

- ``remote`` and the test fixtures: provider ``openai`` at the stand-in's
  ``/learn/{tag}/v1`` (:mod:`bench.recall.extractor` forwards or scripts the answer and
  counts every call; ``max_retries = 0`` so each counted call is one request);
- ``local``: provider ``local``, the bundled model in the ``picobot`` process. Its
  calls cannot be seen from outside: answers that were no JSON array are counted from
  PicoBot's log line saying it dropped one, and calls as the sessions read or, when
  more, the dropped and failed answers: a lower bound (a session longer than one
  chunk makes more calls, and a JSON answer leaves no log line).

Then ``facts list --user ws:TAG --json`` reads what was stored, and each question's
gold answer is judged against the active facts (:mod:`bench.recall.answers`). The
fact texts stay in memory: the results hold counts and rates only.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.recall import answers
from bench.recall.child import Section, config_text, run_command
from bench.recall.dataset import Conversation, Question
from bench.recall.extractor import LOCAL, Extractor, LearnModel

JUDGED_CATEGORIES = (1, 2, 3, 4)
"""Categories whose gold answer is judged; 5 (adversarial) has no answer to cover."""
LOG_NAME = "facts-extract"
FACTS_LIMIT = 1_000_000
NOT_JSON_LOG = "dropped an extraction answer that was not a JSON array"
FAILED_LOG = re.compile(r"fact extraction of session \S+ failed")
_READ = re.compile(r"Read (\d+) new messages of (\d+) sessions: (\d+) new facts, (\d+) reinforced")


def answer_words(question: Question) -> frozenset[str] | None:
    """The content words a question's answer must show; None when it is not judged
    (category 5, no answer, an answer of stopwords only)."""
    if question.category not in JUDGED_CATEGORIES or question.answer is None:
        return None
    found = answers.content_words(question.answer)
    return found or None


@dataclass(slots=True)
class Learned:
    """What extraction did for one conversation (counts; the texts are not reported)."""

    sessions: int = 0
    messages_read: int = 0
    calls: int = 0
    calls_counted: str = "requests"
    """``requests`` (each seen at the stand-in) or ``lower_bound`` (the local model)."""
    json_answers: int = 0
    failed_calls: int = 0
    facts_created: int = 0
    facts_stored: int = 0
    facts_active: int = 0
    seconds: float = 0.0
    covered: dict[int, bool] = field(default_factory=dict)
    """qa index -> whether one active fact covers its answer (judged questions only)."""

    def row(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "sessions": self.sessions,
            "messages_read": self.messages_read,
            "extraction_calls": self.calls,
            "calls_counted": self.calls_counted,
            "json_answers": self.json_answers,
            "failed_calls": self.failed_calls,
            "facts_created": self.facts_created,
            "facts_stored": self.facts_stored,
            "facts_active": self.facts_active,
            "seconds": self.seconds,
        }


class Learner:
    """Runs extraction for each conversation with one model."""

    def __init__(self, model: LearnModel, extractor: Extractor | None) -> None:
        self.model = model
        self.extractor = extractor
        """The stand-in's extraction route (every kind but ``local``)."""

    def llm_section(self, learn_url: str) -> Section:
        """The ``[llm]`` section of the extraction command."""
        if self.model.kind == LOCAL:
            return {"provider": "local"}
        return {
            "provider": "openai",
            "base_url": learn_url,
            "model": self.model.name,
            "api_key_env": "PICOBOT_EVAL_LLM_KEY",
            "timeout_secs": 900.0,
            "max_retries": 0,
        }

    async def learn(
        self,
        conv: Conversation,
        tag: str,
        workdir: Path,
        learn_url: str,
        settings_env: dict[str, str],
    ) -> Learned:
        """Extract the facts of conversation ``tag`` (its server stopped) and judge them."""
        started = time.perf_counter()
        user = f"ws:{tag}"
        config = config_text(workdir / "data", "", self.llm_section(learn_url))
        out = await run_command(
            workdir, config, ["facts", "extract", "--user", user], settings_env, log_name=LOG_NAME
        )
        done = Learned()
        match = _READ.search(out)
        if match:
            done.messages_read, done.sessions, done.facts_created = map(int, match.groups()[:3])
        log = (workdir / f"{LOG_NAME}.log").read_text(encoding="utf-8", errors="replace")
        if self.extractor is not None:
            counts = self.extractor.counts.get(tag, Counter())
            done.calls, done.json_answers = counts["calls"], counts["json"]
            done.failed_calls = counts["failed"]
        else:
            # One call per session read, unless the log shows more answers than that.
            done.calls_counted = "lower_bound"
            done.failed_calls = len(FAILED_LOG.findall(log))
            not_json = log.count(NOT_JSON_LOG)
            done.calls = max(done.sessions, not_json + done.failed_calls)
            done.json_answers = done.calls - done.failed_calls - not_json
        listing = await run_command(
            workdir,
            config,
            ["facts", "list", "--user", user, "--json", "--limit", str(FACTS_LIMIT)],
            settings_env,
            log_name="facts-list",
        )
        facts = json.loads(listing)["facts"]
        active = [f"{f.get('subject') or ''} {f['text']}" for f in facts if f.get("active")]
        done.facts_stored, done.facts_active = len(facts), len(active)
        for question in conv.questions:
            want = answer_words(question)
            if want is not None:
                done.covered[question.index] = answers.covered_by_any(want, active)
        done.seconds = round(time.perf_counter() - started, 1)
        return done
