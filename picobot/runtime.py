"""Wiring: open the database, build the provider and the kernel, own their lifetimes.

Every entry point (TUI, serve, CLI commands) goes through :func:`open_runtime`, so the
parts are assembled in one place and closed in reverse order on the way out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

from picobot.config import Settings
from picobot.kernel.kernel import Kernel
from picobot.kernel.retriever import WindowRetriever
from picobot.kernel.tokens import ProviderTokenEstimator
from picobot.llm.base import LLMProvider
from picobot.llm.factory import build_provider
from picobot.store.db import Database
from picobot.store.messages import MessageRepo
from picobot.tools.base import ToolRegistry


@dataclass(slots=True)
class Runtime:
    """The assembled application: settings, database, model and kernel."""

    settings: Settings
    db: Database
    provider: LLMProvider
    kernel: Kernel


@asynccontextmanager
async def open_database(settings: Settings) -> AsyncIterator[Database]:
    """Open the configured database (migrated) and close it on exit."""
    db = await Database.open(settings.db_path, busy_timeout_ms=settings.data.busy_timeout_ms)
    try:
        yield db
    finally:
        await db.close()


@asynccontextmanager
async def open_runtime(
    settings: Settings, *, provider: LLMProvider | None = None
) -> AsyncIterator[Runtime]:
    """Assemble PicoBot; ``provider`` overrides the configured model (tests, benches)."""
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(open_database(settings))
        llm = provider if provider is not None else build_provider(settings.llm)
        stack.push_async_callback(llm.aclose)
        estimator = ProviderTokenEstimator(llm)
        memory = settings.session.memory
        retriever = WindowRetriever(
            MessageRepo(db),
            estimator,
            budget_tokens=memory.context_budget_tokens,
            max_messages=memory.max_session_messages,
        )
        kernel = Kernel(
            db=db,
            provider=llm,
            retriever=retriever,
            estimator=estimator,
            tools=ToolRegistry(),
            system_prompt=settings.agent.system_prompt,
            max_tool_rounds=settings.llm.max_tool_rounds,
        )
        yield Runtime(settings, db, llm, kernel)
