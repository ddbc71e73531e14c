"""The repetition guard: real loops are stopped and trimmed, legitimate repeats pass."""

from __future__ import annotations

import pytest

from picobot.llm.repetition import (
    HOLDBACK_CHARS,
    MIN_LOOP_CHARS,
    RepetitionGuard,
    copies_needed,
    find_loop,
)

# The bundled model's answer to a first "Hi! My name is Dana ..." before the guard.
PIXEL = "Podra ajudar a Pixel como a Pixel como Pixel?"
PIXEL_LOOP = "Olá Dana! " + "\n\n".join([PIXEL] * 30)

LEGIT = [
    # Lists whose items share most of their words.
    "Here is your plan:\n- Monday: walk Pixel in the park.\n- Tuesday: walk Pixel in"
    " the garden.\n- Wednesday: walk Pixel in the park.\n- Thursday: walk Pixel by the"
    " river.\n- Friday: walk Pixel in the park.",
    "1. Preheat the oven.\n2. Mix the flour.\n3. Mix the sugar.\n4. Mix the eggs.\n"
    "5. Bake for 20 minutes.\n6. Let it cool for 10 minutes.",
    # Short emphatic repeats.
    "No no no, that is not what I meant. Ha ha ha, very very funny!",
    "Yes, yes, yes! I'm so happy for you, Dana. Congratulations, congratulations!",
    # A phrase the user asked for five times.
    "I love Lisbon. I love Lisbon. I love Lisbon. I love Lisbon. I love Lisbon.",
    # Code may repeat itself.
    "Here you go:\n```python\ngrid = [" + ", ".join(["0"] * 40) + "]\n```\nDone.",
    "```python\ngrid = [" + ", ".join(["0"] * 40),
    "```\n" + "=" * 200,
    "```python\n" + "".join(f"row_{i} = [0, 0, 0, 0]\n" for i in range(12)),
    "```python\n" + "x = x + 1\n" * 5,
    # A table separator and a short rule.
    "| a | b |\n|---|---|\n| 1 | 2 |\n" + "-" * 40,
]


def stream(text: str, guard: RepetitionGuard, size: int = 3) -> str:
    """Feed ``text`` in small pieces as a model would, stopping when the guard says so."""
    shown = ""
    for i in range(0, len(text), size):
        shown += guard.feed(text[i : i + size])
        if guard.looped:
            break
    return shown + guard.finish()


def test_the_reported_loop_is_cut_after_its_first_copy() -> None:
    loop = find_loop(PIXEL_LOOP)
    assert loop is not None
    assert loop.unit_words == len(PIXEL.split())
    assert PIXEL_LOOP[: loop.cuts[0]] == f"Olá Dana! {PIXEL}"


def test_streaming_stops_early_and_shows_one_copy() -> None:
    guard = RepetitionGuard()
    shown = stream(PIXEL_LOOP, guard)
    assert guard.looped
    assert shown == f"Olá Dana! {PIXEL}"


def test_a_word_loop_inside_a_sentence_is_cut() -> None:
    text = "I can help you with Pixel como a Pixel como a Pixel como a Pixel como a Pixel"
    text += " como a Pixel como a Pixel como a Pixel"
    guard = RepetitionGuard()
    assert stream(text, guard) == "I can help you with Pixel como a"
    assert guard.loop is not None
    assert guard.loop.unit_words == 3


def test_a_long_sentence_repeated_twice_is_a_loop() -> None:
    sentence = "I am here to help you with anything you need today, Dana from Lisbon."
    assert len(sentence.split()) >= 10
    assert find_loop(f"{sentence} {sentence}") is not None
    assert find_loop(sentence) is None


def test_a_loop_of_very_long_words_is_a_loop() -> None:
    # The bundled model once answered a Portuguese greeting with one long
    # "word" repeated; sixteen copies would not have fit in its 256 tokens.
    word = "EHELIEN-BEURRE-SALADONES-PORTSHOLM-CASTELLLA-BARRIERS:"
    guard = RepetitionGuard()
    assert stream("RIA-BARRIES: " + " ".join([word] * 12), guard) == f"RIA-BARRIES: {word}"
    assert guard.looped


def test_text_without_spaces_that_repeats_is_a_loop() -> None:
    guard = RepetitionGuard()
    assert stream("Wow" + "!" * 500, guard) == "Wow!"
    assert guard.looped
    cjk = "你好" + "我是机器人。" * 60
    assert stream(cjk, RepetitionGuard()) == "你好我是机器人。"


def test_a_long_loop_inside_a_code_block_is_still_a_loop() -> None:
    # The bundled model once listed cat names in a code block, over and over.
    names = "Luna Mia Astrus Karen Rex Zephyra Echo Hermione Jenna Tina Dora Bella"
    text = "Your cat's name could be:\n```\nPicoBella\nCatie\n" + "\n".join([names] * 4)
    text = text.replace(" ", "\n")
    guard = RepetitionGuard()
    shown = stream(text, guard)
    assert guard.looped
    assert shown.endswith("Bella") and shown.count("Hermione") == 1


def test_a_long_list_said_twice_in_a_code_block_is_a_loop() -> None:
    # The same model, cut off by max_tokens before a third copy: twenty names, twice.
    names = "Santa Luna Mia Astrus Karen Rex Zephyra Echo Hermione Jenna Tina Dora Odyssa"
    names += " Fiona Giraffe Cheri Lena Pinky Bella"
    text = "Your cat's name could be:\n```\nPicoBella\nCatie\n" + " ".join([names] * 3)
    text = text.replace(" ", "\n")
    guard = RepetitionGuard()
    shown = stream(text, guard)
    assert guard.looped
    assert shown.count("Hermione") == 1


@pytest.mark.parametrize("text", LEGIT)
def test_legitimate_repetition_passes_untouched(text: str) -> None:
    assert find_loop(text) is None
    guard = RepetitionGuard()
    assert stream(text, guard) == text
    assert not guard.looped


def test_a_loop_already_shown_ends_at_a_copy_boundary() -> None:
    # A guard that holds nothing back can only stop the loop, not hide its copies:
    # the reply then ends after a whole copy, never halfway through one.
    guard = RepetitionGuard(holdback_chars=0)
    shown = stream(PIXEL_LOOP, guard)
    assert guard.looped
    assert shown.endswith(PIXEL)
    assert shown.count(PIXEL) == guard.loop.copies if guard.loop else False


def test_held_back_text_is_released_at_the_end() -> None:
    text = "A normal reply that ends well. " * 1 + "x" * (HOLDBACK_CHARS // 2)
    guard = RepetitionGuard()
    shown = ""
    for ch in text:
        shown += guard.feed(ch)
    assert len(shown) <= len(text) - min(len(text), HOLDBACK_CHARS) + 1
    assert shown + guard.finish() == text


def test_copies_needed_grows_as_units_shrink() -> None:
    assert copies_needed(1) == 16
    assert copies_needed(1, 100) == 3
    assert copies_needed(3, 15) == 6
    assert copies_needed(3) == 6
    assert copies_needed(9) == 3
    assert copies_needed(10) == 2
    assert MIN_LOOP_CHARS > 100
