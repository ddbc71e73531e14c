"""The model's profile sizes its prompt: the bundled model gets one it can read quickly.

It evaluates ~200-320 prompt tokens/s on 2 cores; a new prompt epoch filled by recall to
the 4000-token budget took 11-17 s (28-35 s with a core busy) before its first token.
"""

from __future__ import annotations

from pathlib import Path

from picobot.config.settings import Settings
from picobot.llm.base import ContextText
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound
from picobot.runtime import open_runtime
from picobot.text.tokens import prompt_cost
from tests.test_runtime import until_indexed

ALICE = Identity("tui", "tui:alice", "local")


class BundledStandIn(ScriptedProvider):
    """Says it is the bundled model, as LocalProvider does: the profile follows it."""

    bundled = True


async def biggest_prompt(tmp_path: Path, llm: dict[str, object]) -> int:
    conf = Settings(data={"dir": str(tmp_path / llm["provider"])}, llm=llm)  # type: ignore[arg-type]
    provider = BundledStandIn()
    async with open_runtime(conf, provider=provider) as rt:
        for i in range(30):
            text = f"note {i}: the tram to Lisbon harbour " + "was slow and crowded " * 12
            async for _ in rt.kernel.handle(Inbound(ALICE, text)):
                pass
        await until_indexed(rt)
        async for _ in rt.kernel.handle(Inbound(ALICE, "/new")):
            pass
        async for _ in rt.kernel.handle(Inbound(ALICE, "what about Lisbon harbour?")):
            pass
        return prompt_cost(rt.kernel.estimator, provider.prompts[-1])


async def test_the_bundled_model_gets_a_prompt_sized_to_it(tmp_path: Path) -> None:
    # A new session's first prompt: recall fills what the budget leaves.
    bundled = await biggest_prompt(tmp_path, {"provider": "local"})
    capable = await biggest_prompt(tmp_path, {"provider": "openai"})
    assert bundled <= 1024 + 64  # the profile's budget (plus the current message)
    assert capable > 2 * bundled  # the same chat, a model without that profile


async def test_context_and_recall_reach_the_model_marked_as_context(tmp_path: Path) -> None:
    conf = Settings(data={"dir": str(tmp_path / "data")}, llm={"provider": "scripted"})  # type: ignore[arg-type]
    provider = ScriptedProvider()
    async with open_runtime(conf, provider=provider) as rt:
        for text in ("/remember name: Dana", "I live in Lisbon near the harbour", "/new"):
            async for _ in rt.kernel.handle(Inbound(ALICE, text)):
                pass
        await until_indexed(rt)
        for text in ("tell me about the harbour", "and the tram?"):
            async for _ in rt.kernel.handle(Inbound(ALICE, text)):
                pass
    for prompt in provider.prompts[-2:]:
        marked = [m.content for m in prompt if isinstance(m.content, ContextText)]
        assert any("name: Dana" in c for c in marked), prompt
        # The user's own words never carry the mark.
        assert not isinstance(prompt[-1].content, ContextText)
    first = provider.prompts[-2]
    assert any("Lisbon" in m.content and isinstance(m.content, ContextText) for m in first)


def test_the_bundled_model_reads_context_as_system_turns_and_the_user_apart() -> None:
    from picobot.llm.base import ChatMessage
    from picobot.llm.local import USER_SAYS, to_llama_messages

    prompt = [
        ChatMessage("system", "You are PicoBot."),
        ChatMessage("user", ContextText("Context ... name: Dana")),
        ChatMessage("user", "hi"),
        ChatMessage("assistant", "Hello!"),
        ChatMessage("user", ContextText("Records recalled ... user: I live in Lisbon")),
        ChatMessage("user", "where do I live?"),
    ]
    bundled = to_llama_messages(prompt, context_as_system=True)
    assert [m["role"] for m in bundled] == ["system", "user", "assistant", "system", "user"]
    assert "name: Dana" in bundled[0]["content"] and bundled[-1]["content"] == "where do I live?"
    # Before, the recalled "I live in Lisbon" and the question were one user turn.
    other = to_llama_messages(prompt)
    assert [m["role"] for m in other] == ["system", "user", "assistant", "user"]
    assert other[-1]["content"].endswith(f"{USER_SAYS}\nwhere do I live?")
    assert other[1]["content"].endswith(f"{USER_SAYS}\nhi")
