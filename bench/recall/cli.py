"""``python -m bench.recall [--file PATH]``: the recall evaluation (``make eval``).

Replays a LoCoMo-format file through ``picobot serve``'s WebSocket channel with a
recording stand-in model, asks every question in a fresh session and as a
continuation of the last one, and reports how often the evidence turns reach the
model's prompt, beside BM25 and window-only baselines computed in the same run.
With ``--learn``, a real model (``--learn-model URL`` or ``--learn-local``) then
extracts facts through ``picobot facts extract`` and the questions are asked again:
answer coverage by facts and recall with facts off and on (:mod:`bench.recall.learn`).
Writes recall.json and recall.md (``--out``), prints the table; progress on stderr.
See docs/eval.md.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import os
import platform
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.recall import baseline, dataset, report, vectors
from bench.recall.child import ROOT, ServerError, setting_env
from bench.recall.extractor import LOCAL, REMOTE, Extractor, LearnModel
from bench.recall.learn import Learner
from bench.recall.replay import MODES, Progress, Replayed, ReplayError, replay
from bench.recall.standin import StandIn

DEFAULT_FILE = ROOT.parent / "shared" / "eval" / "locomo-dev.json"
SOURCE = (
    "LoCoMo (Maharana et al., ACL 2024; https://github.com/snap-research/locomo),"
    " CC BY-NC 4.0; never copied into this repository"
)
"""Where the conversations come from, said on every run and on a missing file."""
DEFAULT_OUT = ROOT / "bench" / "results"
DEFAULTS = {
    "recall_budget_tokens": 800,
    "context_budget_tokens": 4000,
    "max_session_messages": 20,
}
"""PicoBot's defaults of the ``[session.memory]`` keys the baselines copy; a
``--setting`` of one of them applies to the baselines too."""


@dataclass(slots=True)
class EvalConfig:
    """What one evaluation run does."""

    file: Path = DEFAULT_FILE
    out_dir: Path | None = DEFAULT_OUT
    modes: tuple[str, ...] = MODES
    conversations: int | None = None
    questions: int | None = None
    seed: int = 0
    jobs: int = 0
    """Conversations replayed at once, each on its own server (0: one per CPU)."""
    settings: list[str] = field(default_factory=list)
    purge: bool = True
    keep_workdir: bool = False
    dump_prompts: bool = False
    learn: LearnModel | None = None
    """Extract facts after each conversation and ask its questions again (``--learn``)."""
    embeddings: bool = False
    """Replay again with the local embedding model on and report both (``--embeddings``)."""
    store_url: str | None = None
    """A PostgreSQL server: each conversation's server stores into a new database of it
    (dropped after), instead of a SQLite file (``--store-url``)."""


def _git_commit() -> str:
    """The repository's commit, ``+changes`` when picobot/ differs from it."""
    try:
        out = subprocess.run(  # noqa: S603
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],  # noqa: S607
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
        dirty = subprocess.run(  # noqa: S603
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "picobot"],  # noqa: S607
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def _tag(n: int, sample_id: str) -> str:
    """A WebSocket identity and URL segment for conversation ``n``."""
    return f"c{n}-" + re.sub(r"[^A-Za-z0-9_.-]", "_", sample_id)[:48]


def memory_settings(settings_env: dict[str, str]) -> dict[str, int]:
    """The ``[session.memory]`` sizes the baselines use: PicoBot's defaults or the
    ``--setting`` values."""
    out = dict(DEFAULTS)
    for key in out:
        value = settings_env.get(f"PICOBOT_SESSION__MEMORY__{key.upper()}", "").strip()
        if value.isdigit():
            out[key] = int(value)
    return out


async def _replay_all(
    cfg: EvalConfig,
    convs: Sequence[dataset.Conversation],
    workdir: Path,
    settings_env: dict[str, str],
    progress: Progress,
) -> tuple[list[Replayed], dict[str, int]]:
    jobs = cfg.jobs or os.cpu_count() or 1
    gate = asyncio.Semaphore(max(1, jobs))
    extractor = None
    if cfg.learn is not None and cfg.learn.kind != LOCAL:
        extractor = Extractor(cfg.learn)
    learner = Learner(cfg.learn, extractor) if cfg.learn is not None else None
    async with StandIn(extractor) as standin:

        async def one(n: int, conv: dataset.Conversation) -> Replayed:
            async with gate:
                tag = _tag(n, conv.sample_id)
                progress(
                    f"{conv.sample_id}: {conv.turn_count} turns, {len(conv.questions)} questions"
                )
                with _store(cfg.store_url, settings_env) as env:
                    done = await replay(
                        conv,
                        tag,
                        standin,
                        workdir / tag,
                        cfg.modes,
                        settings_env=env,
                        purge=cfg.purge,
                        keep_prompts=cfg.dump_prompts,
                        progress=progress,
                        learner=learner,
                    )
                progress(f"{conv.sample_id}: done {done.seconds}")
                return done

        done = await asyncio.gather(*(one(n, c) for n, c in enumerate(convs, 1)))
        return list(done), dict(standin.counts)


@contextmanager
def _store(server_url: str | None, settings_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """The settings of one conversation's server: on a new PostgreSQL database of
    ``server_url`` with a master key of its own (dropped after), or as they are."""
    if server_url is None:
        yield settings_env
        return
    from tests.pg.cluster import temporary_database

    with temporary_database(server_url) as url:
        key = base64.b64encode(secrets.token_bytes(32)).decode()
        yield {**settings_env, "PICOBOT_STORE__URL": url, "PICOBOT_MASTER_KEY": key}


def _baselines(
    convs: Sequence[dataset.Conversation], sizes: dict[str, int]
) -> dict[str, dict[report.Key, bool]]:
    recall, context = sizes["recall_budget_tokens"], sizes["context_budget_tokens"]
    budgets = sorted({DEFAULTS["recall_budget_tokens"], DEFAULTS["context_budget_tokens"], recall})
    out: dict[str, dict[report.Key, bool]] = {}
    for conv in convs:
        flags = baseline.hits(
            conv,
            budgets,
            recall_budget=recall,
            context_budget=context,
            window_messages=sizes["max_session_messages"],
        )
        for name, hits in flags.items():
            out.setdefault(name, {}).update({(conv.sample_id, i): h for i, h in hits.items()})
    return out


def evaluate(cfg: EvalConfig, progress: Progress) -> dict[str, Any]:
    """Run the evaluation; the result document (written to ``cfg.out_dir`` if set)."""
    started = time.perf_counter()
    if cfg.learn is not None and "session" in cfg.modes:
        # Facts are extracted from the stored conversation after the questions: the
        # questions asked into its last session would be learned from too.
        cfg = replace(cfg, modes=tuple(m for m in cfg.modes if m != "session"))
        progress("--learn: the session mode is left out (it writes into the conversation)")
    all_convs = dataset.load(cfg.file)
    convs = dataset.select(
        all_convs, max_conversations=cfg.conversations, max_questions=cfg.questions, seed=cfg.seed
    )
    # The picobot rows are keyword recall; --embeddings adds the rows with vectors.
    settings_env = {vectors.PROVIDER_ENV: "none", **dict(setting_env(s) for s in cfg.settings)}
    workdir = Path(tempfile.mkdtemp(prefix="picobot-recall-"))
    try:
        replays, calls = asyncio.run(_replay_all(cfg, convs, workdir, settings_env, progress))
        if cfg.embeddings:
            progress("again with recall by meaning (--embeddings)")
            on_env = {**settings_env, **vectors.ON}
            vector_started = time.perf_counter()
            on, _ = asyncio.run(_replay_all(cfg, convs, workdir / "vectors", on_env, progress))
            vector_seconds = round(time.perf_counter() - vector_started, 1)
    except BaseException:
        # The servers' logs and databases are what a failed run is debugged with.
        progress(f"work directory kept: {workdir}")
        raise
    if cfg.keep_workdir:
        progress(f"work directory kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    sizes = memory_settings(settings_env)
    baselines = _baselines(convs, sizes)
    data = cfg.file.read_bytes()
    run = {
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "file": str(cfg.file),
        "file_name": cfg.file.name,
        "file_sha256": hashlib.sha256(data).hexdigest(),
        "commit": _git_commit(),
        "modes": list(cfg.modes),
        "questions": sum(len(c.questions) for c in convs),
        "questions_per_conversation_cap": cfg.questions,
        "seed": cfg.seed,
        "skipped": {
            reason: sum(len(c.skipped.get(reason, [])) for c in convs)
            for reason in ("no_evidence", "unresolved_evidence")
        },
        "settings": settings_env,
        "purge_after_each_question": cfg.purge,
        "model_calls": {k: calls.get(k, 0) for k in ("chat", "background", "rejected")},
        **({"learn_model": _learn_model(cfg.learn)} if cfg.learn is not None else {}),
        "memory_sizes": sizes,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    doc = report.build(convs, replays, baselines, cfg.modes, run)
    if cfg.embeddings:
        run_on = {**run, "settings": on_env, "wall_seconds": vector_seconds}
        doc = vectors.merge(doc, report.build(convs, on, {}, cfg.modes, run_on))
    if cfg.out_dir is not None:
        js, md = report.write(doc, cfg.out_dir)
        progress(f"wrote {js} and {md}")
        if cfg.dump_prompts:
            _dump_prompts(cfg.out_dir / "recall.prompts.jsonl", replays)
    return doc


def _learn_model(model: LearnModel) -> dict[str, Any]:
    return {
        "kind": model.kind,
        "base_url": model.base_url,
        "name": model.name,
        "key_env": model.key_env,
        "describe": model.describe(),
        "fixture": model.fixture,
    }


def _dump_prompts(path: Path, replays: Sequence[Replayed]) -> None:
    import json

    with path.open("w", encoding="utf-8") as out:
        for r in replays:
            for a in r.asked:
                out.write(json.dumps({"sample_id": r.sample_id, **a.row(), "prompt": a.prompt}))
                out.write("\n")


def _progress() -> Progress:
    started = time.monotonic()

    def emit(line: str) -> None:
        print(f"[{time.monotonic() - started:7.1f}s] {line}", file=sys.stderr, flush=True)

    return emit


def parse_args(argv: Sequence[str] | None) -> EvalConfig:
    """The command line as an :class:`EvalConfig`."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.recall",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file_arg", nargs="?", metavar="FILE", help="same as --file")
    parser.add_argument("--file", type=Path, help=f"LoCoMo-format JSON (default: {DEFAULT_FILE})")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where recall.json/.md go")
    parser.add_argument("--conversations", type=int, metavar="N", help="only the first N")
    parser.add_argument(
        "--questions", type=int, metavar="N", help="at most N questions per conversation (sampled)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the question sample")
    parser.add_argument(
        "--modes", default=",".join(MODES), help=f"some of {','.join(MODES)} (default all)"
    )
    parser.add_argument(
        "--jobs", type=int, default=0, help="conversations replayed at once (default: CPUs)"
    )
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="a PicoBot setting to try, e.g. session.memory.recall_budget_tokens=1600",
    )
    parser.add_argument(
        "--embeddings",
        action="store_true",
        help="replay again with the local embedding model and report both (recall by meaning)",
    )
    parser.add_argument(
        "--no-purge",
        action="store_true",
        help="keep each question's session (shows that the residue check catches it)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the servers' work directory")
    learn = parser.add_argument_group("learned facts (docs/eval.md, 'Learned facts')")
    learn.add_argument(
        "--learn",
        action="store_true",
        help="extract facts with a real model after each conversation, ask again, compare",
    )
    learn.add_argument(
        "--learn-model", metavar="URL", help="OpenAI-compatible base URL (e.g. http://host:8080/v1)"
    )
    learn.add_argument("--learn-model-name", metavar="NAME", default="", help="model to ask for")
    learn.add_argument(
        "--learn-model-key-env", metavar="VAR", default="", help="env var holding its API key"
    )
    learn.add_argument(
        "--learn-local", action="store_true", help="extract with the bundled local model"
    )
    parser.add_argument(
        "--store-url",
        metavar="URL",
        help="a PostgreSQL server (a role that may create databases): replay on it",
    )
    parser.add_argument(
        "--dump-prompts",
        action="store_true",
        help="also write recall.prompts.jsonl: every judged prompt (holds the file's text)",
    )
    args = parser.parse_args(argv)
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes: a comma-separated list of {', '.join(MODES)}")
    for name in ("conversations", "questions"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be at least 1")
    for setting in args.setting:
        try:
            setting_env(setting)
        except ValueError as exc:
            parser.error(str(exc))
    learn_model = _learn_args(parser, args)
    if learn_model is not None and args.modes != ",".join(MODES) and "session" in modes:
        parser.error(
            "--learn: the session mode writes into the conversation facts are learned from"
        )
    return EvalConfig(
        file=args.file or (Path(args.file_arg) if args.file_arg else DEFAULT_FILE),
        out_dir=args.out,
        modes=modes,
        conversations=args.conversations,
        questions=args.questions,
        seed=args.seed,
        jobs=args.jobs,
        settings=list(args.setting),
        purge=not args.no_purge,
        keep_workdir=args.keep,
        dump_prompts=args.dump_prompts,
        learn=learn_model,
        embeddings=args.embeddings,
        store_url=args.store_url,
    )


def _learn_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> LearnModel | None:
    """The extraction model of ``--learn``; a real one or an error."""
    if not args.learn:
        if (
            args.learn_model
            or args.learn_local
            or args.learn_model_name
            or args.learn_model_key_env
        ):
            parser.error(
                "--learn-model, --learn-model-name, --learn-model-key-env and --learn-local"
                " need --learn"
            )
        return None
    if args.learn_model and args.learn_local:
        parser.error("--learn: give --learn-model URL or --learn-local, not both")
    if args.learn_local:
        if args.learn_model_name or args.learn_model_key_env:
            parser.error(
                "--learn-model-name and --learn-model-key-env go with --learn-model,"
                " not --learn-local"
            )
        return LearnModel(LOCAL)
    if not args.learn_model:
        parser.error(
            "--learn needs a real model to extract facts: --learn-model URL"
            " [--learn-model-name NAME] (an OpenAI-compatible server such as llama.cpp's"
            " or Ollama's) or --learn-local (the bundled model); the stand-in cannot"
            " learn anything worth measuring"
        )
    key_env = args.learn_model_key_env
    if key_env and not os.environ.get(key_env):
        parser.error(f"--learn-model-key-env: the variable {key_env} is not set")
    try:
        return LearnModel(REMOTE, args.learn_model, args.learn_model_name, key_env)
    except ValueError as exc:
        parser.error(str(exc))
    return None  # parser.error does not return


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; exit status 2 for a bad file or arguments, 1 for a failed run."""
    cfg = parse_args(argv)
    if not cfg.file.is_file():
        hint = (
            " (the development split lives in ../shared/eval/ beside the repository)"
            if cfg.file == DEFAULT_FILE
            else ""
        )
        # Say where the data comes from, so a user without the shared folder can get it.
        print(
            f"python -m bench.recall: no LoCoMo file at {cfg.file}{hint}; pass --file PATH."
            f" The data: {SOURCE}.",
            file=sys.stderr,
        )
        return 2
    progress = _progress()
    progress(f"data: {cfg.file} ({SOURCE})")
    try:
        doc = evaluate(cfg, progress)
    except dataset.LocomoError as exc:
        print(f"python -m bench.recall: {exc}", file=sys.stderr)
        return 2
    except (ReplayError, ServerError) as exc:
        print(f"python -m bench.recall: the replay failed: {exc}", file=sys.stderr)
        return 1
    print(report.markdown(doc))
    return 0
