"""Background work has its own model ([llm.background]), and learning says with which.

With the bundled SmolLM2-135M as the background model, nothing is learned unless asked
for: it wrote 0 valid fact lists of 21 and reflections in its own persona.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from picobot.config.learning import LearningSettings, learning_state
from picobot.config.settings import LLMSettings, Settings
from picobot.llm.factory import build_background_provider
from picobot.llm.scripted import ScriptedProvider
from picobot.messages import Identity, Inbound, Outbound
from picobot.runtime import Runtime, markers_taught, open_runtime

ALICE = Identity("tui", "tui:alice", "local")
REFLECTION = "What happened: the user lives in Lyon. Decisions: none. Open items: none."


class BundledStandIn(ScriptedProvider):
    """Speaks the provider protocol and says it is the bundled model, as LocalProvider does."""

    bundled = True


async def say(rt: Runtime, text: str) -> list[Outbound]:
    return [e async for e in rt.kernel.handle(Inbound(ALICE, text))]


def test_learning_is_off_with_the_bundled_model_unless_asked_for() -> None:
    default = learning_state(LearningSettings(), LLMSettings())
    assert not default.on and "[llm.background]" in default.reason
    assert default.describe().startswith("off: the bundled SmolLM2-135M")
    asked = learning_state(LearningSettings(with_bundled_model=True), LLMSettings())
    assert asked.describe() == "on, with the bundled SmolLM2-135M"
    capable = LLMSettings(background={"provider": "openai", "model": "qwen2.5-7b-instruct"})
    assert learning_state(LearningSettings(), capable).describe() == (
        "on, with openai:qwen2.5-7b-instruct"
    )
    own = LLMSettings(model_path="/models/Qwen2.5-3B-Instruct-Q4_K_M.gguf")
    assert learning_state(LearningSettings(), own).describe() == (
        "on, with Qwen2.5-3B-Instruct-Q4_K_M.gguf"
    )
    off = learning_state(LearningSettings(enabled=False), capable)
    assert not off.on and off.reason == "[memory.learning] enabled = false"


def test_background_keys_left_empty_come_from_llm() -> None:
    llm = LLMSettings(
        provider="openai",
        base_url="http://127.0.0.1:11434/v1",
        model="llama3.2",
        background={"provider": "openai", "model": "qwen2.5:0.5b"},
    )
    resolved = llm.for_background()
    assert resolved is not None
    assert (resolved.provider, resolved.model, resolved.base_url) == (
        "openai",
        "qwen2.5:0.5b",
        "http://127.0.0.1:11434/v1",
    )
    assert LLMSettings().for_background() is None
    with pytest.raises(ValueError, match="context_tokens"):
        LLMSettings(background={"context_tokens": 100})


async def test_the_bundled_model_learns_nothing_by_default(tmp_path: Path) -> None:
    conf = Settings(data={"dir": str(tmp_path / "data")})
    provider = BundledStandIn([REFLECTION] * 5)
    async with open_runtime(conf, provider=provider) as rt:
        assert rt.learning is None
        assert rt.learning_state is not None and not rt.learning_state.on
        await say(rt, "I live in Lyon")
        reply = (await say(rt, "/reflect"))[-1]
    assert reply.text.startswith("Learning is switched off on this server (the bundled")
    assert all("reflection" not in p[0].content for p in provider.prompts)


async def test_background_work_runs_on_the_background_model(tmp_path: Path) -> None:
    conf = Settings(
        data={"dir": str(tmp_path / "data")},
        llm={"background": {"provider": "scripted"}},
    )
    chat = BundledStandIn()
    async with open_runtime(conf, provider=chat) as rt:
        assert rt.learning_state is not None and rt.learning_state.on
        assert isinstance(rt.background, ScriptedProvider) and rt.background is not chat
        await say(rt, "I live in Lyon")
        await say(rt, "/reflect")
        background_prompts = list(rt.background.prompts)
    assert any("reflection" in p[0].content for p in background_prompts)
    assert all("reflection" not in p[0].content for p in chat.prompts)


def test_a_local_chat_model_gets_a_second_context_for_background_work() -> None:
    from picobot.errors import LLMError
    from picobot.llm.local import LocalProvider

    try:
        LocalProvider(LLMSettings())  # nothing is loaded: the files are only found
    except LLMError:
        pytest.skip("needs the [local] extra")

    chat = LocalProvider(LLMSettings())
    background = build_background_provider(LLMSettings(), chat)
    assert isinstance(background, LocalProvider) and background is not chat
    assert background.model_path == chat.model_path and background.bundled
    scripted = ScriptedProvider()
    assert build_background_provider(LLMSettings(provider="scripted"), scripted) is scripted


def test_markers_are_taught_to_any_model_but_the_bundled_one() -> None:
    def conf(**llm: object) -> Settings:
        return Settings(llm=llm)

    assert not markers_taught(conf())
    # A GGUF of your own is not the bundled model: it is told (it was not, before).
    assert markers_taught(conf(model_path="/models/qwen2.5-3b.gguf"))
