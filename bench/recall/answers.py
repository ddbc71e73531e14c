"""The answer rule: do a text's words cover a question's gold answer?

Used for **answer coverage by facts** (is the answer in one active learned fact?) and
**answer in prompt** (are the answer's words anywhere in the prompt?). See the
"Learned facts" section of docs/eval.md.

**Words.** Unicode NFKC, case folded, ``'s`` dropped, thousands separators removed
(``10,000`` -> ``10000``); then runs of letters or digits. Each word is normalized:
number words to digits (``two`` -> ``2``, ``third`` -> ``3``), ordinals to digits
(``7th`` -> ``7``), leading zeros dropped (``07`` -> ``7``), month abbreviations to
the month (``Jun`` -> ``june``), and a plural's ``s`` dropped (``classes`` ->
``class``, ``parties`` -> ``party``).

**Content words** of an answer: its words without :data:`STOPWORDS`. An answer
without any (``"Yes"``, ``"No"``) cannot be judged and is counted apart.

**Covered**: every content word of the answer is a word of the text, in any order:
``"7 May 2023"`` is covered by ``"... on May 7th, 2023"``. The rule knows no
synonyms, paraphrases or relative dates (``"the week before 9 June 2023"`` is not
covered by ``"last week"``), so it undercounts; it does not check that the words
belong together, so in a long text (a whole prompt) it overcounts.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

_STOPWORDS_TEXT = """
    a an the of in on at to for and or but nor with by from as into onto about than
    is are was were be been being am do does did has have had will would can could
    i me my mine you your yours he him his she her hers it its we us our ours they
    them their theirs this that these those there here who whom whose which what
    when where why how not no yes so very just also too some any all both each
    other such own same s t
"""
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())
"""Words that carry no answer on their own: articles, pronouns, auxiliaries."""
_WORDS_TEXT = """
    zero one two three four five six seven eight nine ten eleven twelve thirteen
    fourteen fifteen sixteen seventeen eighteen nineteen twenty |
    zeroth first second third fourth fifth sixth seventh eighth ninth tenth eleventh
    twelfth |
    january february march april may june july august september october november december
"""
_NUMBERS, _ORDINALS, _MONTHS = (part.split() for part in _WORDS_TEXT.split("|"))
_ALIASES: dict[str, str] = {
    **{w: str(n) for n, w in enumerate(_NUMBERS)},
    **{w: str(n) for n, w in enumerate(_ORDINALS) if n},
    **{m[:3]: m for m in _MONTHS},
    "sept": "september",
}
_WORD = re.compile(r"[^\W_]+")
_ORDINAL = re.compile(r"(\d+)(?:st|nd|rd|th)")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_POSSESSIVE = re.compile(r"['\u2019]s\b")


def _word(token: str) -> str:
    match = _ORDINAL.fullmatch(token)
    if match:
        token = match.group(1)
    token = _ALIASES.get(token, token)
    if token.isdigit():
        return str(int(token))
    if len(token) > 4 and token.endswith("ies"):
        return token[:-3] + "y"
    if len(token) > 4 and token.endswith(("sses", "shes", "ches", "xes", "zes")):
        return token[:-2]
    if len(token) > 3 and token.endswith("s") and not token.endswith("ss"):
        return token[:-1]
    return token


def words(text: str) -> set[str]:
    """The normalized words of ``text`` (see the module docstring)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _THOUSANDS.sub("", _POSSESSIVE.sub("", text))
    return {_word(token) for token in _WORD.findall(text)}


def content_words(answer: str) -> frozenset[str]:
    """The words an answer must show: its words without :data:`STOPWORDS`."""
    return frozenset(w for w in words(answer) if w not in STOPWORDS)


def covered(answer: frozenset[str], text: str) -> bool:
    """Whether ``text`` holds every content word of ``answer`` (False for none)."""
    return bool(answer) and answer <= words(text)


def covered_by_any(answer: frozenset[str], texts: Iterable[str]) -> bool:
    """Whether one of ``texts`` alone covers ``answer``."""
    return any(covered(answer, text) for text in texts)
