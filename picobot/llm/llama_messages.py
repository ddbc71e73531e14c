"""Chat messages as any GGUF chat template accepts them (the local provider's input).

Tool results and calls become plain turns, consecutive turns of one role merge, and the
context PicoBot wrote is kept apart from the user's words.
"""

from __future__ import annotations

from collections.abc import Sequence

from picobot.llm.base import ChatMessage, ContextText

USER_SAYS = "The user's new message:"
"""Put before the user's words when they share a turn with context (see below)."""


def to_llama_messages(
    messages: Sequence[ChatMessage], *, context_as_system: bool = False
) -> list[dict[str, str]]:
    """Convert messages to what any GGUF chat template accepts.

    Tool results become user turns (templates know no ``tool`` role), assistant tool
    calls are written out as text, and consecutive turns of the same role are merged,
    since strict templates (Mistral, Gemma) require roles to alternate.

    Context PicoBot wrote (:class:`~picobot.llm.base.ContextText`: memories, summary,
    recalled records) must not read as the user's words, which a small model then
    repeats as its own ("I live in Lisbon"). With ``context_as_system`` (the bundled
    model's ChatML template takes a system turn anywhere) it becomes a system turn;
    otherwise, when the user's words follow it in one merged turn, they are labelled.
    """
    out: list[dict[str, str]] = []
    after_context = False
    for message in messages:
        role: str = message.role
        content = message.content
        is_context = role == "user" and isinstance(content, ContextText)
        if is_context and context_as_system:
            role = "system"
        elif role == "user" and not is_context and after_context and out[-1]["role"] == "user":
            content = f"{USER_SAYS}\n{content}"
        after_context = is_context
        if role == "tool":
            role, content = "user", f"Tool result:\n{content}"
        elif message.tool_calls:
            calls = "\n".join(
                f"[called tool {c.name} with {c.arguments}]" for c in message.tool_calls
            )
            content = f"{content}\n{calls}" if content else calls
        if out and out[-1]["role"] == role:
            out[-1]["content"] += "\n\n" + content
        else:
            out.append({"role": role, "content": content})
    return out
