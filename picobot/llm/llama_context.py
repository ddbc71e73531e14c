"""The local provider's llama.cpp context: llama-cpp-python's ``Llama``, told of each prompt.

Imported only when a model loads: importing ``llama_cpp`` loads its shared library.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llama_cpp import Llama

from picobot.llm.prompt_states import PromptRead, PromptStates, held_tokens, read_of, shared_prefix


class ChatLlama(Llama):
    """A ``Llama`` that notes how it read each prompt and, given :class:`PromptStates`,
    resumes from the kept state that serves the prompt best.

    ``create_completion`` is where ``create_chat_completion`` hands over the prompt as
    tokens, the first point at which it can be compared with what is held.
    """

    def __init__(self, *args: Any, states: PromptStates | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.states = states
        self.on_read: Callable[[PromptRead], None] | None = None
        """Told how each prompt will be read, before the model reads it."""

    def create_completion(self, prompt: Any, *args: Any, **kwargs: Any) -> Any:
        """``Llama.create_completion``, after loading a kept state that serves ``prompt``."""
        if isinstance(prompt, list):
            if self.states is not None:
                read = self.states.prepare(self, prompt)
            else:
                read = read_of(prompt, shared_prefix(held_tokens(self), prompt))
            if self.on_read is not None:
                self.on_read(read)
        return super().create_completion(prompt, *args, **kwargs)
