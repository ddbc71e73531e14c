"""Wiring: open the database, build the provider and the kernel, own their lifetimes.

Every entry point (TUI, serve, CLI commands) goes through :func:`open_runtime`, so the
parts are assembled in one place and closed in reverse order on the way out: the
background tasks first (cancelled and awaited), then the model, then the database.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Literal

from picobot.access.permissions import grants_for
from picobot.commands.edit import EditCommands
from picobot.commands.export import ExportCommands
from picobot.commands.facts import FactCommands
from picobot.commands.history import HistoryCommands
from picobot.commands.memories import MemoryCommands
from picobot.commands.pins import PinCommands
from picobot.commands.privacy import PrivacyCommands
from picobot.commands.purge import PurgeCommands
from picobot.commands.search import SearchCommands
from picobot.commands.summary import SummaryCommands
from picobot.config.learning import LearningState, learning_state
from picobot.config.settings import Settings
from picobot.kernel.kernel import Kernel
from picobot.kernel.prompt.recall_block import forget_lines
from picobot.kernel.prompt.retriever import MemoryRetriever
from picobot.llm.base import LLMProvider
from picobot.llm.embedding import Embedder, build_embedder
from picobot.llm.factory import build_background_provider, build_provider
from picobot.memory.markers import INSTRUCTIONS as MARKER_INSTRUCTIONS
from picobot.privacy.controller import PrivacyController
from picobot.privacy.redaction import Redactor
from picobot.recall.meaning import VectorRecall
from picobot.services.bundle import Services
from picobot.services.events import EventService
from picobot.services.export import ExportService
from picobot.services.facts import FactService
from picobot.services.notes import NoteService
from picobot.services.pins import PinService
from picobot.services.preferences import PreferenceService
from picobot.services.purges import PurgeService
from picobot.services.search import SearchService
from picobot.services.sessions import SessionService
from picobot.store.backup import prune_key_backups
from picobot.store.conversation.memories import MemoryRepo
from picobot.store.conversation.memory_cache import MemoryCache
from picobot.store.conversation.preferences import PreferenceStore
from picobot.store.conversation.summaries import SummaryRepo
from picobot.store.db import Database
from picobot.store.erasure.legacy_import import import_sessions_json
from picobot.store.keys import open_keyring
from picobot.store.keys.keyring import KEY_STORE_FILE
from picobot.store.learned.fact_paraphrase import FactParaphrases
from picobot.store.learned.fact_rules import lifecycle_rules
from picobot.store.learned.fact_writes import FactStore
from picobot.store.learned.pins import PinStore
from picobot.store.migrations import require_current_schema
from picobot.store.retrieval.search import SearchIndex
from picobot.store.retrieval.terms import forget_words
from picobot.tasks.caps import StorageCaps, cap_limits
from picobot.tasks.cluster import ClusterJobs
from picobot.tasks.learning import LearningTask, extraction_input_tokens
from picobot.tasks.purge_watch import PURGE_WATCH_SECS, Drop, PurgeWatch
from picobot.tasks.reply_learning import ReplyLearner
from picobot.tasks.retention import RetentionTask
from picobot.tasks.summarize import Summarizer, summary_limits
from picobot.tasks.supervisor import TaskSupervisor
from picobot.tasks.vector_index import VectorIndexer
from picobot.text.tokens import ProviderTokenEstimator, forget_texts
from picobot.tools.catalog import ToolDeps, build_tools

WAL_CHECKPOINT_SECS = 1.0
INDEX_INTERVAL_SECS = 0.5
SUMMARY_DEBOUNCE_SECS = 0.5
"""After a turn, the summarizer waits this long before checking its session, so a busy
session's turns share one check (the fold itself runs in the background anyway)."""
MEMORY_CACHE_PRUNE_SECS = 5.0
"""How often the memory and fact caches drop lists whose rows changed or were purged."""


@dataclass(slots=True)
class Runtime:
    """The assembled application: settings, database, model, kernel and tasks."""

    settings: Settings
    db: Database
    provider: LLMProvider
    kernel: Kernel
    tasks: TaskSupervisor
    summarizer: Summarizer
    services: Services
    learning: LearningTask | None = None
    background: LLMProvider | None = None
    """The model of background work (``[llm.background]``), when it is not ``provider``."""
    learning_state: LearningState | None = None
    """Whether the bot learns by itself and with which model (status, dashboard)."""


SchemaPolicy = Literal["migrate", "current", "as_is"]
"""What :func:`open_database` does about the schema version of the file."""


def forget_cached_texts() -> None:
    """Drop the process-wide caches keyed by texts (token estimates, stems): called after
    every deletion of content, so none of it stays in memory."""
    forget_texts()
    forget_words()
    forget_lines()


@asynccontextmanager
async def open_database(
    settings: Settings, *, schema: SchemaPolicy = "migrate", keys_for_migrate: bool = False
) -> AsyncIterator[Database]:
    """Open the configured database and close it on exit.

    ``schema``: ``"migrate"`` applies pending migrations first (everything that
    writes); ``"current"`` changes nothing and refuses a schema that is not current
    (commands that only read, see :func:`require_current_schema`); ``"as_is"``
    changes and checks nothing (``picobot status`` and ``migrate`` look for themselves).
    The key store is opened when it exists, and made when the schema is migrated
    (``keys_for_migrate``: by ``picobot migrate``, which migrates by itself).
    """
    makes_keys = schema == "migrate" or keys_for_migrate
    url = settings.store.resolved_url() or None
    # On PostgreSQL the key store is in the database: every instance opens the same one.
    keys = (
        open_keyring(settings.data_dir, settings.keys, url=url)
        if makes_keys or url is not None or (settings.data_dir / KEY_STORE_FILE).exists()
        else None
    )
    try:
        db = await Database.open(
            settings.db_path,
            busy_timeout_ms=settings.data.busy_timeout_ms,
            migrate=schema == "migrate",
            readers=settings.data.reader_threads,
            keys=keys,
            url=url,
        )
    except BaseException:
        if keys is not None:
            keys.close()
        raise
    try:
        # What the repositories store is redacted as the kernel's input is (see Database).
        db.redact = Redactor.from_settings(settings.privacy).redact
        if schema == "current":
            await require_current_schema(db)
        yield db
    finally:
        await db.close()
        if keys is not None:
            keys.close()


def build_services(
    settings: Settings,
    db: Database,
    *,
    learning: LearningTask | None = None,
    clock: Callable[[], float] = time.time,
    meaning: VectorRecall | None = None,
) -> Services:
    """The services every front end calls (see :mod:`picobot.services`), once per database.

    With ``learning``, facts are written through its store (one writer of the rules in
    force); without, through a store with the configured rules.
    """
    memory = settings.session.memory
    privacy = settings.privacy
    controller = PrivacyController(
        db,
        confirmation_timeout_secs=privacy.confirmation_timeout_secs,
        batch_size=privacy.retention_batch_size,
        clock=clock,
    )
    store = (
        learning.store
        if learning is not None
        else FactStore(db, rules=lifecycle_rules(settings.memory.learning))
    )
    return Services(
        notes=NoteService(
            MemoryRepo(db),
            max_count=memory.max_user_memories,
            max_chars=memory.max_memory_chars,
            enabled=memory.enable_user_memories,
        ),
        facts=FactService(
            db,
            store,
            learning,
            clock,
            off_because=""
            if learning is not None
            else learning_state(settings.memory.learning, settings.llm).reason,
        ),
        pins=PinService(PinStore(db), clock),
        purges=PurgeService(controller),
        export=ExportService(db),
        search=SearchService(SearchIndex(db), max_terms=memory.recall_max_terms, meaning=meaning),
        sessions=SessionService(db),
        events=EventService(db),
        preferences=PreferenceService(PreferenceStore(db), clock),
    )


class _KernelClock:
    """The kernel's clock, read when called: tests move ``kernel.clock`` after assembly,
    and the services' time (purge expiry, fact edits) moves with it."""

    def __init__(self) -> None:
        self.kernel: Kernel | None = None

    def __call__(self) -> float:
        return self.kernel.clock() if self.kernel is not None else time.time()


def build_kernel(
    settings: Settings,
    db: Database,
    provider: LLMProvider,
    *,
    memory_cache: MemoryCache | None = None,
    learning: LearningTask | None = None,
    embedder: Embedder | None = None,
) -> Kernel:
    """The kernel with its retriever, tools and commands, as configured (see
    :func:`assemble`, which also returns the services)."""
    return assemble(
        settings, db, provider, memory_cache=memory_cache, learning=learning, embedder=embedder
    )[0]


def assemble(
    settings: Settings,
    db: Database,
    provider: LLMProvider,
    *,
    memory_cache: MemoryCache | None = None,
    learning: LearningTask | None = None,
    embedder: Embedder | None = None,
) -> tuple[Kernel, Services]:
    """The kernel with its retriever, tools and commands, and the services they share
    with the other front ends.

    With ``learning`` (see :func:`learning_task`): reply markers hidden from the user
    and learned, and ``/reflect``; the other fact commands are there either way.
    """
    # The prompt is sized to the model (its profile may lower the budget and recall floor),
    # the one that answers: a stand-in for the bundled model (tests, benches) is not it.
    memory = settings.prompt_memory
    if settings.llm.bundled and not getattr(provider, "bundled", False):
        memory = settings.session.memory
    estimator = ProviderTokenEstimator(provider)
    meaning = None if embedder is None else VectorRecall(embedder, settings.embeddings)
    retriever = MemoryRetriever(
        db=db,
        estimator=estimator,
        settings=memory,
        cache=memory_cache,
        learning=settings.memory.learning,
        vectors=meaning,
    )
    clock = _KernelClock()
    services = build_services(settings, db, learning=learning, clock=clock, meaning=meaning)
    notes = services.notes if memory.enable_user_memories else None
    search = services.search
    tools = build_tools(ToolDeps(settings, search.index, notes, search.terms, meaning))
    kernel = Kernel(
        db=db,
        provider=provider,
        retriever=retriever,
        estimator=estimator,
        tools=tools,
        system_prompt=settings.system_prompt,
        max_tool_rounds=settings.llm.max_tool_rounds,
        grants=functools.partial(grants_for, settings=settings),
        budget_tokens=memory.context_budget_tokens,
    )
    clock.kernel = kernel
    if notes is not None:
        MemoryCommands(notes).register(kernel.commands)
    SearchCommands(services.search).register(kernel.commands)
    SummaryCommands(SummaryRepo(db)).register(kernel.commands)
    PurgeCommands(services.purges).register(kernel)
    HistoryCommands(services.purges).register(kernel.commands)
    EditCommands(services.sessions).register(kernel.commands)
    if isinstance(retriever, MemoryRetriever):  # a deleted message leaves its prompt at once
        services.purges.controller.on_purged.append(retriever.forget)
    services.purges.controller.after_purge.append(forget_cached_texts)
    caps = StorageCaps(
        db,
        cap_limits(settings.session.retention),
        batch_size=settings.privacy.retention_batch_size,
        clock=clock,
    )
    if caps.enabled:
        kernel.after_turn.append(caps.enforce)
        if isinstance(retriever, MemoryRetriever):
            caps.on_trimmed.append(retriever.forget)
        caps.on_trimmed.append(lambda _: forget_cached_texts())
    # The fact commands stay with learning off: people can still see and delete theirs.
    FactCommands(services.facts).register(kernel.commands)
    PinCommands(services.pins, services.facts).register(kernel.commands)
    PrivacyCommands(services.preferences, notes).register(kernel.commands)
    ExportCommands(services.export).register(kernel.commands)
    if learning is not None:
        kernel.learner = ReplyLearner(learning.store, kernel.clock)
        if markers_taught(settings):
            kernel.system_prompt = f"{kernel.system_prompt}\n\n{MARKER_INSTRUCTIONS}".strip()
    return kernel, services


def markers_taught(settings: Settings) -> bool:
    """Whether the system prompt tells the chat model about [MEMORY:...] reply lines.

    Only while learning is on (see :func:`learning_task`): "on" tells every model,
    "auto" every model but the bundled SmolLM2-135M (a GGUF of your own included).
    """
    learning = settings.memory.learning
    if not learning.enabled or learning.markers == "off":
        return False
    # The bundled small model cannot follow it reliably and would leak the grammar.
    return learning.markers == "on" or not settings.llm.bundled


def learning_task(settings: Settings, db: Database, provider: LLMProvider) -> LearningTask | None:
    """The learning task on ``provider`` (the background model), or None when learning is
    off: switched off, or ``provider`` is the bundled model without ``with_bundled_model``
    (see :func:`~picobot.config.learning.learning_state`)."""
    state = learning_state(
        settings.memory.learning, settings.llm, bundled=getattr(provider, "bundled", False)
    )
    if not state.on:
        return None
    return LearningTask(
        db,
        provider,
        ProviderTokenEstimator(provider),
        settings.memory.learning,
        max_input_tokens=extraction_input_tokens(settings.llm.for_background() or settings.llm),
    )


@asynccontextmanager
async def open_runtime(
    settings: Settings, *, provider: LLMProvider | None = None, warm_up: bool = False
) -> AsyncIterator[Runtime]:
    """Assemble PicoBot; ``provider`` overrides the configured model (tests, benches).

    ``warm_up`` loads a local model now: a missing or broken model file fails here, with
    one clear line, instead of at the first message; and llama.cpp's load (which points
    the process's stdout at /dev/null for a moment) happens before a UI owns the screen.
    """
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(open_database(settings))
        llm = provider if provider is not None else build_provider(settings.llm)
        stack.push_async_callback(llm.aclose)
        embedder = build_embedder(settings.embeddings)
        if embedder is not None:
            stack.push_async_callback(embedder.aclose)
        load = getattr(llm, "load", None)
        if warm_up and load is not None:
            await load()
        # Summaries, extraction, reflections: their own model, or their own context of the
        # local one (loaded on first use), so they never evict the chat's cached prompt.
        background = build_background_provider(settings.llm, llm)
        if background is not llm:
            stack.push_async_callback(background.aclose)
        state = learning_state(
            settings.memory.learning,
            settings.llm,
            bundled=getattr(background, "bundled", False),
        )
        memory_cache = MemoryCache()
        learning = learning_task(settings, db, background)
        if learning is not None and embedder is not None:
            threshold = settings.embeddings.fact_similarity
            learning.store.paraphrases = FactParaphrases(embedder.embed, threshold=threshold)
        kernel, services = assemble(
            settings, db, llm, memory_cache=memory_cache, learning=learning, embedder=embedder
        )
        # A legacy sessions.json snapshot is imported once (redacted like live messages);
        # a bad file is kept and logged.
        await import_sessions_json(db, settings.data_dir, estimator=kernel.estimator.estimate)
        # Jobs on the whole store run on one instance of those sharing it (leases), and
        # a clean stop hands them over at once (after the supervisor stopped them).
        cluster = ClusterJobs(db)
        stack.push_async_callback(cluster.release_all)
        tasks = await stack.enter_async_context(TaskSupervisor())

        def once(
            name: str, interval: float, fn: Callable[[], Awaitable[object]], **kw: bool
        ) -> None:
            tasks.every(name, interval, cluster.once(name, fn), **kw)

        tasks.every("leases", cluster.keep_interval, cluster.keep)
        memory = settings.session.memory
        chunk_tokens, summary_tokens = summary_limits(settings.llm.for_background() or settings.llm)
        summarizer = Summarizer(
            db,
            background,
            kernel.estimator,
            memory,
            supervisor=tasks,
            max_chunk_tokens=chunk_tokens,
            max_summary_tokens=summary_tokens,
            clock=kernel.clock,
            debounce_secs=SUMMARY_DEBOUNCE_SECS,
        )
        if summarizer.enabled:
            kernel.turn_listeners.append(summarizer.notify)
            once("summarize", memory.summarization_check_interval_secs, summarizer.check_all)
        # What drops kept user text when a deletion anywhere moves the purge generation.
        drops: list[Drop] = []
        # Automatic checkpoints are off (they stalled commits); keep the WAL short here.
        tasks.every("wal-checkpoint", WAL_CHECKPOINT_SECS, db.checkpoint_passive)
        # New messages reach the recall index in batches (see m006_deferred_message_index).
        once("search-index", INDEX_INTERVAL_SECS, SearchIndex(db).index_in_background)
        if embedder is not None:  # and their vectors, for recall by meaning
            batch = settings.embeddings.batch_size
            # The vectors turns computed for recall are stored, not computed again.
            meaning = getattr(kernel.retriever, "vectors", None)
            recent = meaning.recent if isinstance(meaning, VectorRecall) else None
            vectors = VectorIndexer(db, embedder, batch_size=batch, recent=recent)
            once("vector-index", INDEX_INTERVAL_SECS, vectors.run)
            drops.append(vectors.forget_gone)
        # What another process changed or deleted leaves the memory cache too.
        tasks.every("memory-cache", MEMORY_CACHE_PRUNE_SECS, lambda: db.read(memory_cache.prune))
        drops.append(lambda: db.read(memory_cache.prune))
        if isinstance(kernel.retriever, MemoryRetriever):  # its epochs hold recalled text
            retriever = kernel.retriever
            tasks.every("prompt-epochs", MEMORY_CACHE_PRUNE_SECS, retriever.prune_epochs)
            drops.append(lambda: retriever.prune_epochs(records=True))
            facts = retriever.fact_cache
            tasks.every("fact-cache", MEMORY_CACHE_PRUNE_SECS, lambda: db.read(facts.prune))
            drops.append(lambda: db.read(facts.prune))
        retention = RetentionTask(
            db,
            max_age_days=settings.session.retention.max_age_days,
            batch_size=settings.privacy.retention_batch_size,
            clock=kernel.clock,
            erase_interval_secs=settings.session.retention.erase_interval_secs,
        )
        once(
            "retention",
            settings.session.retention.cleanup_interval_secs,
            retention.run,
            run_at_start=True,
        )
        # Key-store copies past their retention go even when no new backup is taken.
        key_copies = settings.keys.backup_path(settings.data_dir)
        once(
            "key-backups",
            settings.session.retention.cleanup_interval_secs,
            lambda: asyncio.to_thread(
                prune_key_backups, key_copies, kernel.clock(), settings.keys.key_backup_days
            ),
            run_at_start=True,
        )
        # Caches keyed by texts forget them after any deletion, here or by another process.
        retention.on_deleted.append(forget_cached_texts)
        drops.append(forget_cached_texts)
        # The local model's kept prompts hold user content: a purge (here or by another
        # process) or a retention run that deleted something drops them all.
        forget_prompts = getattr(llm, "forget_prompts", None)
        if forget_prompts is not None:
            services.purges.controller.after_purge.append(forget_prompts)
            retention.on_deleted.append(forget_prompts)
            drops.append(forget_prompts)
        # A deletion by any process sharing the store reaches all of the above within
        # a second (docs/privacy.md#several-processes).
        watch = PurgeWatch(db, drops)
        tasks.every("purge-watch", PURGE_WATCH_SECS, watch.check, run_at_start=True)
        if learning is not None:
            learning.clock = kernel.clock
            learn = settings.memory.learning
            once("learn", learn.check_interval_secs, learning.check_idle)
            once("fact-decay", learn.decay_interval_secs, learning.decay)
            summarizer.on_summarized.append(
                lambda sid: tasks.spawn(f"learn:{sid}", learning.extract_session(sid))
            )
            # A session ends (idle, /new, a summary): reflect on it in the background.
            reflections = learning.reflections
            reflections.spawn = tasks.spawn
            once("reflect", learn.check_interval_secs, reflections.check_idle)
            summarizer.on_summarized.append(reflections.session_ended)
        yield Runtime(
            settings,
            db,
            llm,
            kernel,
            tasks,
            summarizer,
            services,
            learning,
            background=background if background is not llm else None,
            learning_state=state,
        )
