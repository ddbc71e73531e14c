"""Keyword extraction for recall, and the MATCH expressions built from it."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picobot.recall.keywords import STOP_WORDS, extract_terms, fts_query
from picobot.store.retrieval.search import user_token
from picobot.store.retrieval.terms import UNSPACED_CHAR, WORD, index_text, term_prefix, words


def test_stop_words_and_chat_filler_are_dropped() -> None:
    terms = extract_terms("Hey, please remember that I am flying to Lisbon on Friday, thanks!")
    assert terms == ["flying", "lisbon", "friday"]
    assert {"please", "remember", "thanks", "the", "and"} <= STOP_WORDS


def test_lowercased_deduplicated_and_longest_first() -> None:
    terms = extract_terms("Kafka kafka KAFKA Prague prague castle Kafka")
    assert terms == ["prague", "castle", "kafka"]


def test_max_terms_is_respected_keeping_the_longest() -> None:
    text = "ab abc abcd abcde abcdef abcdefg abcdefgh abcdefghi abcdefghij"
    assert extract_terms(text, max_terms=3) == ["abcdefghij", "abcdefghi", "abcdefgh"]
    assert len(extract_terms(text)) == 8
    assert extract_terms(text, max_terms=0) == []


def test_single_characters_punctuation_and_absurdly_long_tokens_are_skipped() -> None:
    blob = "q" * 200
    assert extract_terms(f"a b c ! ? ... {blob} x_y 42") == ["42"]


def test_unicode_words_stay_whole() -> None:
    # The virama and vowel sign are combining marks: Python's \w alone would split here.
    terms = extract_terms("नमस्ते Zoë 東京 Ünïcode")
    assert terms == ["ünïcode", "नमस्ते", "zoë", "東京"]


def test_only_stop_words_gives_no_terms() -> None:
    assert extract_terms("Thanks, that is all I want to say!") == []


def test_fts_query_keeps_only_prefixed_words_of_each_term() -> None:
    p = term_prefix("alice")
    query = fts_query("alice", ['say "hi"', "NEAR(", "col:x", "*^()"])
    # Operators, quotes and punctuation never reach the expression: each term is one
    # phrase of the user's prefixed words; a term without words is dropped.
    assert query == (
        f'owner:"{user_token("alice")}" AND body:("{p}say {p}hi" OR "{p}NEAR" OR "{p}col {p}x")'
    )


def test_fts_query_drops_nul_and_control_characters() -> None:
    p = term_prefix("alice")
    assert fts_query("alice", ["a\x00b\x07c"]).endswith(f'body:("{p}a {p}b {p}c")')


def test_fts_query_refuses_terms_without_words() -> None:
    with pytest.raises(ValueError):
        fts_query("alice", [])
    with pytest.raises(ValueError):
        fts_query("alice", ['" ', "(*)", ""])


def test_prefixes_differ_between_users_and_words_keep_their_marks() -> None:
    assert term_prefix("alice") != term_prefix("bob")
    assert len(term_prefix("alice")) == 6
    p = term_prefix("alice")
    assert index_text("alice", "Hi, नमस्ते! don't") == f"{p}Hi {p}नमस्ते {p}don {p}t"
    assert index_text("alice", None) is None
    # A lone surrogate (possible in text decoded with surrogateescape) must not raise.
    assert index_text("\udc80", "x").endswith("x")  # type: ignore[union-attr]


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from("_ \u0301\u093f")))
def test_words_splits_exactly_as_the_word_pattern(text: str) -> None:
    # words() is the fast form of WORD.findall, each character of an unspaced script a
    # word of its own; the index and the queries must agree.
    expected = [
        part
        for word in WORD.findall(text)
        for part in re.findall(f"{UNSPACED_CHAR.pattern}|(?:(?!{UNSPACED_CHAR.pattern}).)+", word)
    ]
    assert words(text) == expected
