"""Evaluated prompts of the local model, kept in memory so a session comes back at once.

llama.cpp reuses the part of a new prompt that its context already holds, so the turns
of one session are cheap: each evaluates only the last exchange. After ``/new``,
``/resume`` or ``/fork`` (or another chat's turn) the context holds another prompt, and
the whole prompt is evaluated again: the bundled SmolLM2-135M reads roughly 200-320
prompt tokens/s on a 2-core machine, so a 1000-token prompt costs 3-5 s.

:class:`PromptStates` keeps the context's state (its KV cache) after each reply, one per
conversation (the session the kernel names in :data:`~picobot.llm.base.CONVERSATION`),
the most recently used few. Before a generation, the kept state
that shares the longest prefix with the new prompt is loaded when it shares more than
the context itself does; llama.cpp then drops what follows the shared prefix and
evaluates the rest. A kept state is therefore only ever used for tokens that the new
prompt has at the same place, so a stale one can cost time, never change a reply.

States hold user content (the tokens of a prompt and their KV cache), so they live in
memory only, never on disk, and :meth:`PromptStates.clear` drops all of them: PicoBot
calls it after every purge (``/undo`` and ``/rewind`` included) and retention run that
deleted something, and when the model is closed.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

MAX_BYTES = 256 * 1024 * 1024
"""Most bytes of kept states (SmolLM2-135M: about 23 KB a token, 25 MB a 1024-token
prompt); the least recently used go first."""
MIN_GAIN_TOKENS = 32
"""Least tokens a state must share beyond what the context holds to be loaded: loading
copies the whole state, which costs about as much as evaluating a few tokens."""


@dataclass(frozen=True, slots=True)
class PromptRead:
    """How one generation read its prompt."""

    prompt_tokens: int
    reused_tokens: int
    """Tokens of the prompt already evaluated (held by the context or a loaded state)."""
    restored: bool
    """Whether a kept state was loaded for it."""

    @property
    def evaluated_tokens(self) -> int:
        """Tokens of the prompt the model had to evaluate."""
        return self.prompt_tokens - self.reused_tokens


@dataclass(frozen=True, slots=True)
class _State:
    tokens: tuple[int, ...]
    """Exactly the tokens whose evaluation the state holds, in order."""
    data: bytes


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` have in common."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def held_tokens(llama: Any) -> list[int]:
    """The tokens a llama-cpp-python ``Llama`` context holds evaluated."""
    return [int(t) for t in llama.input_ids[: llama.n_tokens]]


def read_of(prompt: Sequence[int], shared: int, *, restored: bool = False) -> PromptRead:
    """The read of ``prompt`` by a context holding ``shared`` of its leading tokens.

    llama.cpp evaluates at least the prompt's last token, for the logits of the reply.
    """
    return PromptRead(len(prompt), min(shared, max(0, len(prompt) - 1)), restored)


class PromptStates:
    """The last ``capacity`` evaluated prompts of one llama.cpp context, in memory.

    :meth:`prepare` and :meth:`keep` run in the thread that owns the context, around a
    generation; :meth:`clear` may run on any thread, and a state whose generation was
    prepared before a clear is not kept (it may hold what the clear was for).
    """

    def __init__(self, capacity: int, *, max_bytes: int = MAX_BYTES) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.max_bytes = max_bytes
        # By conversation; a generation outside one is kept by its own tokens.
        self._states: OrderedDict[str | tuple[int, ...], _State] = OrderedDict()
        self._lock = threading.Lock()
        self._era = 0
        self._prepared_era = -1

    def __len__(self) -> int:
        return len(self._states)

    @property
    def size_bytes(self) -> int:
        """Bytes of the states kept."""
        with self._lock:
            return sum(len(s.data) for s in self._states.values())

    def prepare(self, llama: Any, prompt: Sequence[int]) -> PromptRead:
        """Load the kept state that serves ``prompt`` best, if it beats the context's own."""
        held = held_tokens(llama)
        live = shared_prefix(held, prompt)
        with self._lock:
            self._prepared_era = self._era
            best, best_key, best_shared = None, None, live
            for key, state in self._states.items():
                shared = shared_prefix(state.tokens, prompt)
                if shared > best_shared:
                    best, best_key, best_shared = state, key, shared
            if best is None or best_key is None or best_shared < live + MIN_GAIN_TOKENS:
                return read_of(prompt, live)
            self._states.move_to_end(best_key)
        try:
            _load(llama, best)
        except Exception:
            # The context may hold part of the state now: start it empty instead.
            log.exception("a kept prompt state could not be loaded; reading the prompt anew")
            llama.reset()
            with self._lock:
                self._states.pop(best_key, None)
            return read_of(prompt, 0)
        return read_of(prompt, best_shared, restored=True)

    def keep(self, llama: Any, conversation: str | None = None) -> None:
        """Keep the context's state as ``conversation``'s latest, replacing the one it had
        (without a conversation: replacing the kept states whose tokens it extends)."""
        tokens = tuple(held_tokens(llama))
        if not tokens:
            return
        with self._lock:
            if self._prepared_era != self._era:
                return
        state = _State(tokens, _save(llama))
        with self._lock:
            if self._prepared_era != self._era or len(state.data) > self.max_bytes:
                return
            # A conversation's next prompt shares most with its latest turn: the one
            # before is of no more use. Outside one, a state this one extends is not.
            key: str | tuple[int, ...] = tokens if conversation is None else conversation
            for old in [k for k in self._states if isinstance(k, tuple) and tokens[: len(k)] == k]:
                del self._states[old]
            self._states.pop(key, None)
            self._states[key] = state
            used = sum(len(s.data) for s in self._states.values())
            while len(self._states) > self.capacity or used > self.max_bytes:
                _, dropped = self._states.popitem(last=False)
                used -= len(dropped.data)

    def clear(self) -> int:
        """Drop every kept state (and any being kept now); returns how many were kept."""
        with self._lock:
            self._era += 1
            count = len(self._states)
            self._states.clear()
            return count


def _save(llama: Any) -> bytes:
    """The context's state (KV cache and the rest llama.cpp writes), as bytes.

    Not ``Llama.save_state``: that also copies the logits of the last batch, 100 MB for
    SmolLM2's vocabulary, which a loaded state never needs (the next generation
    evaluates at least one token before it samples).
    """
    import llama_cpp

    size = llama_cpp.llama_state_get_size(llama.ctx)
    buffer = (ctypes.c_uint8 * size)()
    written = llama_cpp.llama_state_get_data(llama.ctx, buffer, size)
    return ctypes.string_at(buffer, written)


def _load(llama: Any, state: _State) -> None:
    """Put ``state`` into the context: llama.cpp's state, then llama-cpp-python's tokens."""
    import llama_cpp

    size = len(state.data)
    buffer = (ctypes.c_uint8 * size).from_buffer_copy(state.data)
    if llama_cpp.llama_state_set_data(llama.ctx, buffer, size) != size:
        raise RuntimeError("llama.cpp refused a kept prompt state")
    n = len(state.tokens)
    llama.input_ids[:n] = state.tokens
    llama.n_tokens = n
    # Sample only after evaluating at least one token (the loaded logits are not the
    # prompt's); llama-cpp-python's own load_state sets the same flag.
    llama._requires_eval = True
