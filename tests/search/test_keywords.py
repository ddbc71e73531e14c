"""Keyword extraction for recall, and the MATCH expressions built from it."""

from __future__ import annotations

import pytest

from picobot.kernel.keywords import STOP_WORDS, extract_terms, fts_query


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


def test_fts_query_quotes_every_term_and_doubles_quotes() -> None:
    query = fts_query("uabcx", ['say "hi"', "NEAR(", "col:x"])
    assert query == 'owner:"uabcx" AND body:("say ""hi""" OR "NEAR(" OR "col:x")'


def test_fts_query_drops_nul_and_control_characters() -> None:
    assert fts_query("uabcx", ["a\x00b\x07c"]) == 'owner:"uabcx" AND body:("abc")'


def test_fts_query_refuses_no_terms_and_bad_tokens() -> None:
    with pytest.raises(ValueError):
        fts_query("uabcx", [])
    with pytest.raises(ValueError):
        fts_query('u" OR x', ["pizza"])
