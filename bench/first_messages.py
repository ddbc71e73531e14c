"""Varied first messages for ``python -m bench.firstchat``, drawn from a fixed seed.

A new user's first message is the bundled model's hardest test: no history, no
memories, just the system prompt. The mix covers what people open with: greetings
that introduce a name, a place or a pet, questions, requests, small talk, and a few
messages in other languages. The first message is always the one from the bug report.
"""

from __future__ import annotations

import random

REPORTED = "Hi! My name is Dana and I live in Lisbon. I have a cat called Pixel."
"""The message whose reply looped until max_tokens in the bug report."""

NAMES = ["Dana", "Tom", "Aiko", "Lucas", "Priya", "Marta", "Kwame", "Sofia", "Jonas", "Leila"]
CITIES = ["Lisbon", "Leeds", "Osaka", "Porto", "Nairobi", "Lyon", "Toronto", "Kraków", "Austin"]
PETS = [("cat", "Pixel"), ("dog", "Rex"), ("parrot", "Kiwi"), ("rabbit", "Biscuit")]
COUNTRIES = ["France", "Japan", "Kenya", "Canada", "Portugal", "Norway"]
TASKS = ["boil an egg", "make cold brew coffee", "water a cactus", "fix a squeaky door"]
TOPICS = ["photosynthesis", "a black hole", "inflation", "the internet", "a rainbow"]
GOALS = ["sleeping better", "learning Spanish", "saving money", "running a 5k"]
THINGS = ["the sea", "autumn", "my cat", "the morning train", "rain"]
MOODS = ["a bit tired", "great", "nervous about an exam", "bored", "happy"]
COLOURS = ["green", "blue", "orange", "purple"]

GREETINGS = [
    "Hi! My name is {name} and I live in {city}. I have a {pet} called {pet_name}.",
    "Hello, I'm {name} from {city}.",
    "Hey there! I'm {name}. I just moved to {city} with my {pet}, {pet_name}.",
    "Good morning! {name} here. Nice to meet you.",
    "hi",
    "Hello! Who are you?",
]
QUESTIONS = [
    "What's the capital of {country}?",
    "How do I {task}?",
    "Can you explain what {topic} is?",
    "What should I cook for dinner tonight?",
    "Why is the sky blue?",
    "What can you do?",
]
REQUESTS = [
    "Give me three tips for {goal}.",
    "Write a short poem about {thing}.",
    "Help me write a message to my boss saying I'll be late.",
    "Suggest a name for my new {pet}.",
    "Remember that my favourite colour is {colour}.",
    "Tell me a joke.",
]
SMALL_TALK = [
    "I'm feeling {mood} today.",
    "It's raining again here in {city}.",
    "What do you like to do for fun?",
    "I just finished reading a great book.",
    "My {pet} {pet_name} keeps waking me up at 5am.",
]
OTHER_LANGUAGES = [
    "Olá! Chamo-me {name} e moro em {city}.",
    "Hola, ¿cómo estás? Me llamo {name}.",
    "Bonjour ! Je m'appelle {name} et j'habite à {city}.",
    "Hallo! Ich heiße {name}. Wie geht es dir?",
    "Ciao! Mi chiamo {name} e ho un gatto.",
]
MIX = [(GREETINGS, 11), (QUESTIONS, 11), (REQUESTS, 10), (SMALL_TALK, 10), (OTHER_LANGUAGES, 7)]
"""Templates and how many of the 49 drawn messages come from each (plus the reported one)."""


def first_messages(count: int = 50, seed: int = 2026) -> list[str]:
    """``count`` first messages: the reported one, then a seeded shuffle of the mix.

    The same ``count`` and ``seed`` always give the same list.
    """
    rng = random.Random(seed)
    drawn: list[str] = []
    for templates, share in MIX:
        drawn.extend(_draw(templates, rng, drawn) for _ in range(share))
    rng.shuffle(drawn)
    every = [t for templates, _ in MIX for t in templates]
    while len(drawn) < count - 1:  # more than the mix holds: draw from all of it
        drawn.append(_draw(every, rng, drawn))
    return [REPORTED, *drawn][:count]


def _draw(templates: list[str], rng: random.Random, taken: list[str]) -> str:
    """A filled template, a new text if a few tries find one."""
    text = _fill(rng.choice(templates), rng)
    for _ in range(20):
        if text not in taken and text != REPORTED:
            break
        text = _fill(rng.choice(templates), rng)
    return text


def _fill(template: str, rng: random.Random) -> str:
    pet, pet_name = rng.choice(PETS)
    return template.format(
        name=rng.choice(NAMES),
        city=rng.choice(CITIES),
        pet=pet,
        pet_name=pet_name,
        country=rng.choice(COUNTRIES),
        task=rng.choice(TASKS),
        topic=rng.choice(TOPICS),
        goal=rng.choice(GOALS),
        thing=rng.choice(THINGS),
        mood=rng.choice(MOODS),
        colour=rng.choice(COLOURS),
    )
