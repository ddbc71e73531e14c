"""The scripted chat's scorers (``bench/chat_scores.py``): each heuristic on the replies it
must catch and on the honest ones it must let pass."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.chat_scores import Persona, identity_claims, is_echo, language  # noqa: E402

MAYA = Persona(name="Maya", city="Porto", job="nurse")


@pytest.mark.parametrize(
    ("reply", "claims"),
    [
        ("Hi! I'm Maya, nice to meet you.", ["name"]),
        ("Hello there, I am Maya and I love the sea.", ["name"]),
        ("My name is Maya.", ["name"]),
        ("You can call me Maya.", ["name"]),
        ("Nice to meet you, I'm Maya.", ["name"]),
        ("I live in Porto, a lovely city by the river.", ["city"]),
        ("I also live in the city of Porto.", ["city"]),
        ("I'm from Porto too!", ["city"]),
        ("I'm based in Porto.", ["city"]),
        ("My hometown is Porto.", ["city"]),
        ("I'm a nurse in Porto, and I love it.", ["city", "job"]),
        ("I work as a nurse in a big hospital.", ["job"]),
        ("I work at the city hospital as a nurse.", ["job"]),
        ("I'm a nurse, so I know night shifts.", ["job"]),
        ("I am also a night nurse.", ["job"]),
        ("As a nurse, I often skip breakfast.", ["job"]),
        ("My job is being a nurse.", ["job"]),
        ("Hi, I'm Maya. I live in Porto and I work as a nurse.", ["name", "city", "job"]),
        ("I\u2019m Maya.", ["name"]),  # a typographic apostrophe
    ],
)
def test_first_person_details_are_claims(reply: str, claims: list[str]) -> None:
    assert identity_claims(reply, MAYA) == claims


@pytest.mark.parametrize(
    "reply",
    [
        "Hi Maya! I'm PicoBot, nice to meet you.",
        "I'm sorry, Maya, that sounds tiring.",
        "I'm glad you live in Porto, Maya.",
        "You live in Porto and you work as a nurse.",
        "Your name is Maya and you are a nurse in Porto.",
        "I'm sure being a nurse is hard work.",
        "I'm happy to help a nurse like you.",
        "You said: my name is Maya.",
        'You told me "I live in Porto".',
        "I'd love to visit Porto one day.",
        "I'm in love with the idea of a picnic.",
        "I'm glad you found a nice flat in Porto.",
        "I'm a big fan of the food in Porto.",
        "I'm Maya's assistant for today.",
        "As a nurse, you must be tired after a night shift.",
        "I know nurses work hard.",
        "Porto is a beautiful city, and nurses there are great.",
        "",
    ],
)
def test_speaking_of_the_user_is_no_claim(reply: str) -> None:
    assert identity_claims(reply, MAYA) == []


@pytest.mark.parametrize(
    ("message", "reply", "echo"),
    [
        ("Where do I live?", "Where do I live?", True),
        ("where do i live", "Where do I live?!", True),
        (
            "Hi! My name is Maya. I live in Porto and I work as a nurse.",
            "Hello! Hi! My name is Maya. I live in Porto and I work as a nurse. How are you?",
            True,
        ),
        ("Give me three tips for staying awake.", "Give me three tips for staying awake", True),
        ("Where do I live?", "You live in Porto.", False),
        ("Tell me a joke.", "Tell me a joke? Sure: why did the cat sit on the laptop?", False),
        ("Tell me a joke.", "tell me a joke", True),
        (
            "Hi! My name is Maya. I live in Porto and I work as a nurse.",
            "Nice to meet you, Maya! My name is PicoBot. Porto is lovely.",
            False,
        ),
        ("", "anything", False),
    ],
)
def test_echo_is_the_whole_message_said_back(message: str, reply: str, echo: bool) -> None:
    assert is_echo(message, reply) is echo


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ("You could read a good book and go for a walk by the river.", "en"),
        ("Here are three tips: sleep in a dark room, and drink water.", "en"),
        ("Vous pourriez lire un bon livre et faire une promenade au bord de la rivière.", "fr"),
        ("Je vous conseille de dormir dans une chambre sombre et de boire de l'eau.", "fr"),
        ("Puedes leer un libro y dar un paseo por el río con tu perro.", "es"),
        ("Ich empfehle dir, ein Buch zu lesen und mit dem Hund zu gehen.", "de"),
        ("Você pode ler um livro e passear com o seu cão.", "pt"),
        ("Sure!", "unknown"),
        ("Okay 🙂", "unknown"),
        ("", "unknown"),
    ],
)
def test_language_by_stop_words(text: str, lang: str) -> None:
    assert language(text) == lang
