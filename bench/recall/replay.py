"""Replay one conversation through ``picobot serve`` and ask its questions.

Ingest: each LoCoMo session becomes one PicoBot session (``/new`` before it); each
turn is sent as a chat message ``"Speaker: text"`` (plus ``" [shares a photo:
caption]"``), and the stand-in answers it. One WebSocket identity per conversation,
each on a server of its own. Before the questions, a ``/search`` makes PicoBot index
every queued message (the background indexer runs every half second).

Questions, one at a time, in each mode (in this order):

- ``fresh``: ``/new``, the question, then ``/purge session ID`` confirmed with ``y``,
  so no question can see another;
- ``continue``: ``/fork`` of the conversation's last session, the question in the
  fork, then the fork is purged the same way. The last session itself never changes;
- ``kept``: ``/new`` and the question, never purged: earlier questions stay in the
  user's history, as they do for a user (their sessions are purged once the mode is
  done, so later modes do not see them);
- ``session``: every question one after another in the conversation's last session
  itself, no fork, no purge: what a user asking on in one chat lives. It goes last,
  since it changes the last session.

After each question a ``/search`` indexes what is queued, so anything a question
left behind would be searchable by the next one.

The model call that answered the question is the one judged (:mod:`bench.recall.metric`).
Every prompt is also searched for earlier questions of the run: a purge that left
anything behind shows up as ``residue``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from bench.recall import answers, metric
from bench.recall.child import PicobotServer
from bench.recall.dataset import Conversation, Question, Turn
from bench.recall.learn import Learned, Learner, answer_words
from bench.recall.standin import Call, StandIn
from bench.recall.vectors import vectors_on, wait_for_vectors

MODES = ("fresh", "continue", "kept", "session")
PURGED = ("fresh", "continue")
"""Modes whose questions are purged: only there may no earlier question show."""
FLUSH_SEARCH = "/search picobotevalflush"
"""Any /search indexes the queued messages before it answers (the background indexer
runs every half second)."""

Progress = Callable[[str], None]
IDLE_ENV = "PICOBOT_MEMORY__LEARNING__IDLE_SECS"
NEVER_IDLE_SECS = 7 * 86_400
"""The largest ``[memory.learning] idle_secs``: servers of a ``--learn`` run."""


class ReplayError(RuntimeError):
    """PicoBot answered something the replay cannot go on from."""


@dataclass(slots=True)
class Asked:
    """One question asked in one mode, judged."""

    index: int
    category: int
    mode: str
    hit: bool
    found: dict[str, str | None]
    prompt_tokens: int
    recalled_tokens: int
    recalled_items: int
    duplicate_items: int
    residue: int | None
    """Earlier questions in the prompt (None where they are meant to stay)."""
    prompt: list[dict[str, Any]] | None = None
    facts: bool = False
    """Asked after facts were extracted (``--learn``)."""
    answer_in_prompt: bool | None = None
    """The gold answer's words are all in the prompt (None: the answer is not judged)."""
    prefix_share: float | None = None
    """Share of the prompt repeating the session's previous prompt as a prefix
    (``session`` mode; None where the question starts a session)."""

    def row(self) -> dict[str, Any]:
        """The JSON form (without the prompt)."""
        return {
            "qa_index": self.index,
            "category": self.category,
            "mode": self.mode,
            "facts": self.facts,
            "hit": self.hit,
            "answer_in_prompt": self.answer_in_prompt,
            "found": self.found,
            "prompt_tokens": self.prompt_tokens,
            "recalled_tokens": self.recalled_tokens,
            "recalled_items": self.recalled_items,
            "duplicate_items": self.duplicate_items,
            "residue": self.residue,
            "prefix_share": self.prefix_share,
        }


@dataclass(slots=True)
class Replayed:
    """What one conversation's replay produced."""

    sample_id: str
    asked: list[Asked] = field(default_factory=list)
    stored: dict[str, str] = field(default_factory=dict)
    """dia_id -> the text PicoBot stored (as the model saw it when the turn came in)."""
    seconds: dict[str, float] = field(default_factory=dict)
    background_calls: int = 0
    changed_turns: int = 0
    """Turns PicoBot stored otherwise than sent (trimmed whitespace, a redacted secret)."""
    learned: Learned | None = None
    """What extraction did (``--learn``)."""


class Client:
    """The WebSocket protocol of docs/channels.md, one request at a time."""

    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws
        self._next = 0

    async def request(self, frame: dict[str, Any]) -> list[dict[str, Any]]:
        """Send ``frame``; the frames answering it, up to (without) its ``end``."""
        self._next += 1
        rid = str(self._next)
        out: list[dict[str, Any]] = []
        try:
            await self._ws.send(json.dumps({**frame, "id": rid}))
            while True:
                got = json.loads(await self._ws.recv())
                if self._answered(rid, got, out):
                    return out
        except ConnectionClosed as exc:
            raise ReplayError(f"the server closed the connection ({exc})") from None

    @staticmethod
    def _answered(rid: str, got: dict[str, Any], out: list[dict[str, Any]]) -> bool:
        """File one frame answering request ``rid``; True at its ``end``."""
        kind = got.get("type")
        if kind == "pong":
            return False
        if kind == "error":  # with or without reply_to (a frame it could not accept)
            raise ReplayError(f"PicoBot error {got.get('code')}: {got.get('message')}")
        if got.get("reply_to") != rid:
            raise ReplayError(f"unexpected frame {kind} (waiting for the answer to {rid})")
        if kind == "end":
            return True
        out.append(got)
        return False

    async def chat(self, text: str, session_id: str | None = None) -> list[dict[str, Any]]:
        """A chat message (or command); its frames."""
        frame: dict[str, Any] = {"type": "chat", "text": text}
        if session_id is not None:
            frame["session_id"] = session_id
        return await self.request(frame)

    async def new_session(self, command: str = "/new", session_id: str | None = None) -> str:
        """Run ``/new`` or ``/fork``; the session it made current."""
        frames = await self.chat(command, session_id)
        ids = [f["session_id"] for f in frames if f.get("type") == "session"]
        if not ids:
            raise ReplayError(f"{command} named no session")
        return str(ids[-1])

    async def purge(self, session_id: str) -> str:
        """``/purge session ID``, confirmed; PicoBot's report."""
        frames = await self.chat(f"/purge session {session_id}")
        tokens = [f["token"] for f in frames if f.get("type") == "confirm_request"]
        if not tokens:
            raise ReplayError(f"/purge asked for no confirmation: {frames}")
        notices = await self.request({"type": "confirm", "token": tokens[0], "answer": "y"})
        return " ".join(str(f.get("text", "")) for f in notices)


def answering_call(calls: Sequence[Call], sent: str) -> Call:
    """The model call that answered the message ``sent``.

    The one whose last user message is ``sent``; if PicoBot stored it changed (a
    redacted secret), the one chat call made meanwhile.
    """
    want = metric.normalize(sent)
    chat = [c for c in calls if not c.background]
    exact = [c for c in chat if metric.normalize(c.last_user) == want]
    if exact:
        return exact[-1]
    if len(chat) == 1:
        return chat[0]
    raise ReplayError(f"{len(chat)} model calls for one message, none with its text")


class Replay:
    """One conversation on one server: ingest, then the questions in each mode."""

    def __init__(
        self,
        conv: Conversation,
        tag: str,
        standin: StandIn,
        server: PicobotServer,
        *,
        purge: bool = True,
        keep_prompts: bool = False,
        progress: Progress = lambda _line: None,
    ) -> None:
        self.conv = conv
        self.tag = tag
        self.standin = standin
        self.server = server
        self.purge = purge
        self.keep_prompts = keep_prompts
        self.progress = progress
        self.out = Replayed(conv.sample_id)
        self._earlier: list[str] = []
        self._last = ""
        self._facts = False
        self._kept: list[str] = []
        self._previous: list[dict[str, Any]] | None = None

    async def run(self, modes: Sequence[str], *, facts: bool = False) -> Replayed:
        """The whole replay; the server must be running. Failures name the server log.

        With ``facts``, the conversation was ingested already (by an earlier run on the
        same data, before extraction): only the questions are asked again.
        """
        self._facts = facts
        try:
            return await self._run(modes)
        except ReplayError as exc:
            raise ReplayError(f"{exc} (server log: {self.server.log_path})") from None

    async def _run(self, modes: Sequence[str]) -> Replayed:
        headers = {"Authorization": f"Bearer {self.server.api_key}"}
        async with connect(self.server.ws_url, additional_headers=headers, max_size=None) as ws:
            hello = json.loads(await ws.recv())
            if hello.get("type") != "hello":
                raise ReplayError(f"expected hello, got {hello.get('type')}")
            client = Client(ws)
            started = time.perf_counter()
            if not self._facts:
                self._last = await self._ingest(client)
            await client.chat(FLUSH_SEARCH)
            if vectors_on(self.server.settings_env) and not self._facts:
                waited = await wait_for_vectors(self.server.workdir / "data" / "conversations.db")
                self.out.seconds["vectors"] = waited
            self.out.seconds["facts ingest" if self._facts else "ingest"] = round(
                time.perf_counter() - started, 2
            )
            for mode in sorted(modes, key=MODES.index):
                started = time.perf_counter()
                self._previous = None
                for question in self.conv.questions:
                    await self._ask(client, question, mode, self._last)
                while self._kept:  # later modes start from the conversation alone
                    await self._purge(client, self._kept.pop())
                label = f"{mode} + facts" if self._facts else mode
                self.out.seconds[label] = round(time.perf_counter() - started, 2)
        self.out.background_calls += sum(c.background for c in self.standin.take(self.tag))
        return self.out

    async def _send(self, client: Client, label: str, text: str, sid: str | None) -> Call:
        self.standin.label(self.tag, label)
        try:
            await client.chat(text, sid)
        except ReplayError as exc:
            raise ReplayError(f"{self.conv.sample_id} {label}: {exc}") from None
        calls = self.standin.take(self.tag)
        self.out.background_calls += sum(c.background for c in calls)
        return answering_call(calls, text)

    async def _ingest(self, client: Client) -> str:
        """Every session in order; the PicoBot id of the last one."""
        sid = ""
        for n, session in enumerate(self.conv.sessions, 1):
            sid = await client.new_session()
            for turn in session.turns:
                call = await self._send(client, turn.dia_id, turn.message(), sid)
                self.out.stored[turn.dia_id] = call.last_user
                self.out.changed_turns += call.last_user != turn.message()
            self.progress(f"{self.conv.sample_id}: session {n}/{len(self.conv.sessions)} sent")
        return sid

    async def _ask(self, client: Client, question: Question, mode: str, last: str) -> None:
        if mode == "session":
            sid = last
        elif mode == "continue":
            sid = await client.new_session("/fork", last)
        else:
            sid = await client.new_session()
        call = await self._send(client, f"q{question.index}:{mode}", question.text, sid)
        if mode == "kept":
            self._kept.append(sid)
        elif mode in PURGED and self.purge:
            await self._purge(client, sid)
        # Index whatever the question left, so that the next question could recall it:
        # residue, if the purge missed anything, then shows up deterministically.
        await client.chat(FLUSH_SEARCH)
        asked = self._judge(question, mode, call)
        if mode == "session":
            if self._previous is not None:
                asked.prefix_share = metric.prefix_share(self._previous, call.messages)
            self._previous = call.messages
        self.out.asked.append(asked)
        if mode in PURGED:
            self._earlier.append(metric.normalize(question.text))

    async def _purge(self, client: Client, sid: str) -> None:
        report = await client.purge(sid)
        if "cancel" in report.casefold():
            raise ReplayError(f"the purge of a question's session was refused: {report}")

    def _judge(self, question: Question, mode: str, call: Call) -> Asked:
        turns = self.conv.turns()
        needles = {d: self._needle(turns[d]) for d in question.evidence}
        prompt = metric.view(call.messages)
        judged = metric.judge(prompt, needles)
        want = answer_words(question)
        return Asked(
            question.index,
            question.category,
            mode,
            judged.hit,
            judged.found,
            prompt.tokens,
            prompt.recalled_tokens,
            len(prompt.recalled_items()),
            metric.duplicate_items(prompt),
            len(metric.residue(prompt, self._earlier)) if mode in PURGED else None,
            call.messages if self.keep_prompts else None,
            self._facts,
            None if want is None else answers.covered(want, prompt.haystack),
        )

    def _needle(self, turn: Turn) -> str:
        return metric.needle(turn, self.out.stored.get(turn.dia_id))


async def replay(
    conv: Conversation,
    tag: str,
    standin: StandIn,
    workdir: Path,
    modes: Sequence[str],
    *,
    settings_env: dict[str, str] | None = None,
    purge: bool = True,
    keep_prompts: bool = False,
    progress: Progress = lambda _line: None,
    learner: Learner | None = None,
) -> Replayed:
    """Start a server for ``conv``, replay it, stop the server.

    With a ``learner``: then extract facts on the stopped server's data, start it again
    and ask the questions once more (see :mod:`bench.recall.learn`).
    """
    env = dict(settings_env or {})
    if learner is not None:
        # Extraction happens once, by the command below: the servers never learn by
        # themselves, however long the run takes (unless a --setting says otherwise).
        env = {IDLE_ENV: str(NEVER_IDLE_SECS), **env}
    async with PicobotServer(workdir, standin.base_url(tag), tag, env) as server:
        progress(f"{conv.sample_id}: picobot serve on {server.ws_url}")
        job = Replay(
            conv, tag, standin, server, purge=purge, keep_prompts=keep_prompts, progress=progress
        )
        out = await job.run(modes)
    if learner is None:
        return out
    progress(f"{conv.sample_id}: extracting facts ({learner.model.describe()})")
    out.learned = await learner.learn(conv, tag, workdir, standin.learn_url(tag), env)
    progress(
        f"{conv.sample_id}: {out.learned.facts_active} active facts"
        f" from {out.learned.calls} calls in {out.learned.seconds} s"
    )
    log = "picobot-facts.log"
    async with PicobotServer(workdir, standin.base_url(tag), tag, env, log) as server:
        job.server = server
        return await job.run(modes, facts=True)
