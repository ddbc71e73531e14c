"""The answer rule: content words of a gold answer, found in one text, in any order."""

from __future__ import annotations

import pytest

from bench.recall import answers
from bench.recall.dataset import Question
from bench.recall.learn import answer_words


@pytest.mark.parametrize(
    ("answer", "text"),
    [
        ("7 May 2023", "She went there on May 7th, 2023."),
        ("7 May 2023", "the 07 may 2023 trip"),
        ("two cats", "Ann has 2 cats at home"),
        ("Sweden", "caroline moved from sweden"),
        ("Transgender woman", "Caroline is a transgender woman."),
        ("$10,000", "saved 10000 dollars"),
        ("pottery classes", "takes a pottery class on Tuesdays"),
        ("the third of June", "it was June 3rd"),
        ("Melanie's kids", "melanie kids love the beach"),
    ],
)
def test_an_answer_is_covered_by_a_text_holding_its_content_words(answer: str, text: str) -> None:
    assert answers.covered(answers.content_words(answer), text)


@pytest.mark.parametrize(
    ("answer", "text"),
    [
        ("7 May 2023", "She went there in May 2023."),  # the day is missing
        ("the week before 9 June 2023", "she went last week"),  # relative dates: a known limit
        ("Sweden", "she moved from Norway"),
        ("counseling", "she wants to be a therapist"),  # synonyms: a known limit
    ],
)
def test_an_answer_is_not_covered_without_all_its_content_words(answer: str, text: str) -> None:
    assert not answers.covered(answers.content_words(answer), text)


def test_covered_by_any_needs_one_text_to_hold_every_word() -> None:
    want = answers.content_words("glazed vases")
    assert not answers.covered_by_any(want, ["makes glazed bowls", "bought two vases"])
    assert answers.covered_by_any(want, ["unrelated", "three glazed vases for a show"])


def test_answers_without_content_words_and_adversarial_questions_are_not_judged() -> None:
    assert answers.content_words("Yes, she did") == frozenset()
    assert not answers.covered(frozenset(), "anything at all")
    assert answer_words(Question(0, "Did she?", 1, ("D1:1",), "Yes")) is None
    assert answer_words(Question(1, "Where?", 5, ("D1:1",), "Lisbon")) is None
    assert answer_words(Question(2, "Where?", 4, ("D1:1",), None)) is None
    assert answer_words(Question(3, "Where?", 4, ("D1:1",), "in Lisbon")) == {"lisbon"}
