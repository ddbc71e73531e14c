"""The matching rule, on prompts shaped like PicoBot's."""

from __future__ import annotations

from bench.recall import metric
from bench.recall.dataset import Turn

TURN = Turn("D2:5", "Ann", "I adopted a   grey cat named Pixel last week.", "a cat on a sofa")
CONTEXT = (
    "Context for this conversation follows.\n\n"
    '<data source="user_memories">\n- pet: has a dog\n</data>\n\n'
    '<data source="recalled_conversations">\n'
    "On Friday 2 January 2026:\n"
    "user: Ann: I adopted a grey cat named Pixel last week. [shares a photo: x]\n"
    "user: Bo: Lovely &lt;data> tags stay data\n"
    "\n"
    "On Saturday 3 January 2026:\n"
    "user: Ann: I adopted a grey cat named Pixel last week. [shares a photo: x]\n"
    "</data>"
)


def _prompt(*middle: dict[str, str]) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You are PicoBot."},
        *middle,
        {"role": "user", "content": "What is the cat called?"},
    ]


def test_the_needle_drops_the_speaker_and_the_photo() -> None:
    assert metric.needle(TURN) == "i adopted a grey cat named pixel last week."
    stored = "Ann: I adopted a grey cat named Pixel last week. [shares a photo: a cat on a sofa]"
    assert metric.needle(TURN, stored) == metric.needle(TURN)


def test_a_short_turn_must_be_found_whole() -> None:
    assert metric.needle(Turn("D1:1", "Bo", "Thanks!")) == "bo: thanks!"


def test_the_needle_is_what_picobot_stored() -> None:
    turn = Turn("D1:2", "Ann", "my key is sk-abcdefghijklmnopqrstuvwx, keep it safe please")
    stored = "Ann: my key is [REDACTED:api_key], keep it safe please"
    assert metric.needle(turn, stored) == "my key is [redacted:api_key], keep it safe please"


def test_evidence_is_found_in_the_recalled_block_the_window_or_elsewhere() -> None:
    view = metric.view(_prompt({"role": "user", "content": CONTEXT}))
    assert metric.judge(view, {"D2:5": metric.needle(TURN)}).found == {"D2:5": "recalled"}
    assert view.recalled_tokens > 0
    assert len(view.recalled_items()) == 3
    assert metric.duplicate_items(view) == 1
    lt = metric.judge(view, {"x": metric.normalize("Lovely <data> tags stay data")})
    assert lt.hit

    window = metric.view(
        _prompt(
            {"role": "user", "content": "Ann: I adopted a grey cat named\nPixel last week."},
            {"role": "assistant", "content": "ok"},
        )
    )
    assert metric.judge(window, {"D2:5": metric.needle(TURN)}).found == {"D2:5": "window"}
    assert window.recalled_tokens == 0
    memories = metric.view(
        _prompt({"role": "user", "content": CONTEXT.split('\n\n<data source="rec')[0]})
    )
    assert metric.judge(memories, {"m": "- pet: has a dog"}).found == {"m": "other"}


def test_all_evidence_turns_are_needed_and_the_question_itself_does_not_count() -> None:
    view = metric.view(_prompt({"role": "user", "content": CONTEXT}))
    judged = metric.judge(view, {"D2:5": metric.needle(TURN), "D9:9": "never said in this chat"})
    assert not judged.hit
    assert judged.found["D9:9"] is None
    assert not metric.judge(view, {"q": "what is the cat called?"}).hit


def test_residue_finds_earlier_questions_anywhere_but_the_current_message() -> None:
    earlier = [metric.normalize("When did Ann adopt the grey cat, exactly?"), "short one"]
    clean = metric.view(_prompt({"role": "user", "content": CONTEXT}))
    assert metric.residue(clean, earlier) == []
    left = metric.view(
        _prompt({"role": "user", "content": "When did Ann adopt the grey cat,  exactly?"})
    )
    assert metric.residue(left, earlier) == [earlier[0]]


def test_tokens_are_estimated_like_picobot() -> None:
    view = metric.view([{"role": "system", "content": "x" * 9}, {"role": "user", "content": "hi"}])
    assert view.tokens == (3 + 4) + (1 + 4)
    assert metric.distribution([1, 2, 3, 4]) == {
        "n": 4,
        "mean": 2.5,
        "median": 2,
        "p95": 4,
        "max": 4,
    }
