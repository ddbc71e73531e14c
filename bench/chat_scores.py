"""Scores of a scripted chat's replies: identity claims, echoes, the reply's language.

A small model given a user's details tends to say them as its own ("Hi, I'm Maya, a
nurse from Porto") or to say the user's message back; and it drifts between languages.
Each check here is a plain-text heuristic, deliberately narrow, with its cases in
``tests/test_chat_scores.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# --- identity claims ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Persona:
    """The user's details that the bot must not claim as its own."""

    name: str
    city: str
    job: str
    """A job noun, as in "a nurse"."""


_QUOTED = re.compile(r'"[^"]*"|“[^”]*”|«[^»]*»')
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
_REPORTED = re.compile(r"\b(?:said|say|says|told|tell|wrote|write|writes|mentioned)\b", re.I)
"""Words just before a first-person clause that make it the user's words, not the bot's."""
_NOT_A_CLAIM = re.compile(
    r"\b(?:you|your|you're|youre|she|he|they)\b"
    r"|\bi(?:'m|\s+am)\s+(?:sure|glad|happy|sorry|afraid|not|no|curious|so|excited|impressed)\b",
    re.I,
)
"""Words inside a clause that make it about someone else, or a feeling, not a claim."""


def _patterns(persona: Persona) -> dict[str, list[re.Pattern[str]]]:
    name, city, job = (re.escape(x) for x in (persona.name, persona.city, persona.job))
    first = r"\bi(?:'m|\s+am|m)\b"  # "I'm", "I am", "Im"
    also = r"(?:also\s+|actually\s+|just\s+|really\s+)?"
    place = r"(?:the\s+(?:city|town)\s+of\s+|beautiful\s+|sunny\s+|lovely\s+)?"
    return {
        "name": [
            re.compile(rf"{first}\s+{also}(?:called\s+|named\s+)?{name}\b(?!'s)", re.I),
            re.compile(rf"\bmy\s+name\s+(?:is|'s)\s+{also}{name}\b(?!'s)", re.I),
            re.compile(rf"\bcall\s+me\s+{name}\b", re.I),
        ],
        "city": [
            re.compile(
                rf"\bi\s+{also}(?:live|stay|reside|grew\s+up|was\s+born)\s+(?:[\w'-]+\s+){{0,4}}?{city}\b",
                re.I,
            ),
            re.compile(
                rf"{first}\s+{also}(?:from|in|based\s+in|living\s+in)\s+{place}{city}\b", re.I
            ),
            re.compile(rf"\bmy\s+(?:home|city|hometown)\s+(?:is|'s)\s+{place}{city}\b", re.I),
            # "I'm a nurse in Porto": a job and a city in one claim.
            re.compile(
                rf"{first}\s+{also}an?\s+(?:[\w'-]+\s+){{0,3}}?(?:in|from)\s+{city}\b", re.I
            ),
        ],
        "job": [
            re.compile(rf"\bi\s+{also}work\s+(?:[\w'-]+\s+){{0,4}}?as\s+an?\s+{job}\b", re.I),
            re.compile(rf"{first}\s+{also}an?\s+(?:[\w'-]+\s+){{0,2}}?{job}\b", re.I),
            re.compile(rf"\bmy\s+(?:job|work)\s+(?:is|'s)\s+(?:[\w'-]+\s+){{0,3}}?{job}", re.I),
            re.compile(rf"\bas\s+an?\s+{job}\s*,?\s+i\b", re.I),
        ],
    }


def identity_claims(reply: str, persona: Persona) -> list[str]:
    """Which of the user's details (``name``, ``city``, ``job``) ``reply`` claims as the
    bot's own, each at most once, in that order.

    A claim is a first-person clause ("I'm Maya", "I live in Porto", "as a nurse, I ...")
    in one sentence, outside quotation marks. A clause that speaks of someone else ("I'm
    glad you live in Porto"), a feeling ("I'm sorry, Maya") or the user's words ("you
    said: my name is Maya") is not one.
    """
    text = _QUOTED.sub(" ", reply.replace("\u2019", "'"))
    found: list[str] = []
    for what, patterns in _patterns(persona).items():
        if any(_claims(sentence, patterns) for sentence in _SENTENCE.split(text)):
            found.append(what)
    return found


def _claims(sentence: str, patterns: list[re.Pattern[str]]) -> bool:
    for pattern in patterns:
        for match in pattern.finditer(sentence):
            before = sentence[: match.start()].split()[-4:]
            if _NOT_A_CLAIM.search(match.group(0)) or _REPORTED.search(" ".join(before)):
                continue
            return True
    return False


# --- echoes ----------------------------------------------------------------------------

_WORD = re.compile(r"[\w']+", re.UNICODE)
ECHO_MIN_WORDS = 5
"""A message shorter than this echoes only when the reply is nothing but it."""


def words(text: str) -> list[str]:
    """Lower-case words of ``text``, punctuation dropped."""
    return [w.lower() for w in _WORD.findall(text)]


def is_echo(message: str, reply: str) -> bool:
    """Whether ``reply`` says the user's whole ``message`` back, word for word.

    Case and punctuation are ignored. A message of fewer than :data:`ECHO_MIN_WORDS`
    words ("Tell me a joke") echoes only when the reply is that message and nothing else,
    since a short phrase recurs in honest answers.
    """
    said, answered = words(message), words(reply)
    if not said:
        return False
    if len(said) < ECHO_MIN_WORDS:
        return said == answered
    n = len(said)
    return any(answered[i : i + n] == said for i in range(len(answered) - n + 1))


# --- language --------------------------------------------------------------------------


def _stops(text: str) -> frozenset[str]:
    return frozenset(text.split())


STOP_WORDS: dict[str, frozenset[str]] = {
    "en": _stops(
        "the a an and or but is are was were be been to of in on at for with it this that"
        " you your i my me we our they he she not do does can will would should have has"
        " what how why when where which there here so if as by from about"
    ),
    "fr": _stops(
        "le la les un une des et ou mais est sont était être de du au aux en dans sur pour"
        " avec ce cette ces vous votre je mon ma mes nous notre ils elle il ne pas que qui"
        " quoi comment pourquoi quand où se sa son leur très aussi bien"
    ),
    "es": _stops(
        "el la los las un una y o pero es son era ser de del al en con por para este esta"
        " usted tu yo mi nosotros ellos ella no que qué cómo por qué cuando donde muy"
    ),
    "pt": _stops(
        "o a os as um uma e ou mas é são era ser de do da dos das no na em com por para"
        " este esta você seu eu meu nós eles ela não que como quando onde muito"
    ),
    "de": _stops(
        "der die das ein eine und oder aber ist sind war sein zu von im in auf für mit"
        " dies sie du ich mein wir nicht was wie warum wann wo sehr auch"
    ),
}
LANGUAGE_MIN_HITS = 2
"""Stop words a text needs before its language is named (else ``"unknown"``)."""


def language(text: str) -> str:
    """``"en"``, ``"fr"``, ``"es"``, ``"pt"``, ``"de"`` or ``"unknown"``, by stop words.

    The language whose stop words are most of the text's words wins; a text with fewer
    than :data:`LANGUAGE_MIN_HITS` stop words of any language, or a tie for first, is
    ``"unknown"``.
    """
    found = words(text)
    hits = {lang: sum(w in stops for w in found) for lang, stops in STOP_WORDS.items()}
    ranked = sorted(hits.items(), key=lambda item: item[1], reverse=True)
    (best, top), (_, second) = ranked[0], ranked[1]
    if top < LANGUAGE_MIN_HITS or top == second:
        return "unknown"
    return best
