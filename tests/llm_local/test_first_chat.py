"""A new user's first chat with the bundled model, through the kernel as the TUI runs it.

Before the local provider had sampling settings for small models, the reported first
message ("Hi! My name is Dana ...") got one Portuguese sentence repeated until
``max_tokens``. These run a few first messages through ``bench.firstchat`` (the
runtime, the kernel and its prompt builder, the real SmolLM2) with a fixed sampling
seed, so the replies are the same on every run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")

ROOT = Path(__file__).resolve().parent.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.first_messages import REPORTED, first_messages  # noqa: E402
from bench.firstchat import run_config  # noqa: E402

pytestmark = pytest.mark.local_model


async def test_first_replies_end_on_their_own(tmp_path: Path) -> None:
    messages = first_messages(2)
    assert messages[0] == REPORTED
    replies = await run_config("now", messages, tmp_path / "data")
    for reply in replies:
        assert reply.reply.strip(), reply
        # "stop": the model ended the reply; not "length" (max_tokens) and not
        # "repetition" (the guard had to stop a loop).
        assert reply.finish == "stop", reply
        assert not reply.loop, reply
