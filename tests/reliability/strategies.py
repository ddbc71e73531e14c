"""Hypothesis strategies shared by the fuzz tests: JSON-ish values and platform-shaped bodies.

Shaped bodies follow each platform's real structure with every field optional and
every leaf either a plausible value or anything JSON can hold, so the fuzzer gets
past the first ``isinstance`` check and into the code that builds ids and replies.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

SURROGATES_FIXED = True
"""Lone surrogates (JSON ``"\\ud800"``) crash the store today; see test_fuzz_webhooks.
Set to True once fixed: the fuzzers then draw them too and the regression tests,
now marked xfail, must pass."""

FUZZ = settings(max_examples=200, deadline=None, database=None)
"""Modest and without an example database, so nothing is written into the repo."""
FUZZ_SHARED_FIXTURE = settings(FUZZ, suppress_health_check=[HealthCheck.function_scoped_fixture])
"""For tests that run every example against one server built by a fixture, on purpose."""


def chars(*, surrogates: bool = SURROGATES_FIXED) -> st.SearchStrategy[str]:
    """Any code point; lone surrogates only when ``surrogates``."""
    return st.characters(exclude_categories=() if surrogates else ("Cs",))


FIELD_NAMES = [
    "user",
    "chat",
    "text",
    "message_id",
    "object",
    "entry",
    "changes",
    "value",
    "metadata",
    "phone_number_id",
    "messages",
    "from",
    "id",
    "type",
    "body",
    "update_id",
    "message",
    "is_bot",
    "is_topic_message",
    "message_thread_id",
    "team_id",
    "event_id",
    "event",
    "subtype",
    "bot_id",
    "channel",
    "thread_ts",
    "challenge",
    "token",
    "answer",
    "session_id",
    "limit",
]
WORDS = [
    "",
    " ",
    "text",
    "message",
    "event_callback",
    "url_verification",
    "whatsapp_business_account",
    "subscribe",
    "chat",
    "ping",
    "history",
    "confirm",
    "12345",
    "U123",
    "T01",
    "C42",
    "x:y@z",
    "\x00",
    "\t ",
    "a" * 300,
    "[REDACTED:x]",
]


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """Pick a strategy with the given relative weights (``one_of`` does not weigh)."""
    table = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.integers(min_value=0, max_value=len(table) - 1).flatmap(lambda i: table[i])


_surrogate = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, exclude_categories=())
_with_surrogate = st.tuples(st.text(max_size=4), _surrogate, st.text(max_size=4)).map("".join)
texts = weighted(
    (6, st.text(chars(), min_size=1, max_size=24)),
    (2, st.sampled_from(WORDS)),
    (1 if SURROGATES_FIXED else 0, _with_surrogate),
)
keys = st.one_of(st.sampled_from(FIELD_NAMES), st.text(chars(), max_size=8))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    texts,
)
jsonish: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(keys, kids, max_size=5)),
    max_leaves=20,
)
ids = weighted((3, st.from_regex(r"[A-Za-z0-9._-]{1,12}", fullmatch=True)), (1, texts))
numbers = st.one_of(st.integers(min_value=-(2**40), max_value=2**40), st.integers())


def either(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A plausible value most of the time, anything JSON-ish otherwise."""
    return weighted((4, good), (1, jsonish))


def shape(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """An object with the named fields: all plausible, all present, or each maybe there.

    Weighted towards well-formed objects, so that a fair share of the bodies parse and
    the code behind the first checks gets fuzzed too.
    """
    return weighted(
        (3, st.fixed_dictionaries(fields)),
        (1, st.fixed_dictionaries({name: either(value) for name, value in fields.items()})),
        (1, st.fixed_dictionaries({}, optional={n: either(v) for n, v in fields.items()})),
    )


generic_bodies = shape(user=ids, chat=ids, text=texts, message_id=ids)

_wa_message = shape(
    type=st.just("text"),
    **{"from": st.from_regex(r"[0-9]{1,15}", fullmatch=True)},
    id=ids,
    text=shape(body=texts),
)
_wa_value = shape(
    metadata=shape(phone_number_id=st.from_regex(r"[0-9]{1,16}", fullmatch=True)),
    messages=st.lists(either(_wa_message), min_size=1, max_size=3),
)
whatsapp_bodies = shape(
    object=st.just("whatsapp_business_account"),
    entry=st.lists(
        either(shape(changes=st.lists(either(shape(value=_wa_value)), min_size=1, max_size=2))),
        min_size=1,
        max_size=2,
    ),
)

telegram_bodies = shape(
    update_id=numbers,
    message=shape(
        text=texts,
        **{"from": shape(id=numbers, is_bot=st.booleans())},
        chat=shape(id=numbers),
        message_id=numbers,
        is_topic_message=st.booleans(),
        message_thread_id=numbers,
    ),
)

_slack_event = st.one_of(
    shape(type=st.just("message"), user=ids, text=texts, channel=ids, thread_ts=texts),
    shape(
        type=st.just("message"),
        subtype=texts,
        bot_id=texts,
        user=ids,
        text=texts,
        channel=ids,
    ),
)
slack_bodies = shape(
    type=st.one_of(
        st.just("event_callback"),
        st.sampled_from(["event_callback", "url_verification", "app_rate_limited"]),
    ),
    team_id=ids,
    event_id=ids,
    event=_slack_event,
) | shape(type=st.just("url_verification"), challenge=texts)

SHAPES: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "generic": generic_bodies,
    "whatsapp": whatsapp_bodies,
    "telegram": telegram_bodies,
    "slack": slack_bodies,
}


def _utf8(value: Any) -> bytes:
    # Lone surrogates become invalid UTF-8 here: a body no JSON parser should accept.
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


def encoded(values: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    """Bodies from ``values``: ASCII JSON, UTF-8 JSON, or truncated JSON."""
    return weighted(
        (3, values.map(lambda v: json.dumps(v).encode())),
        (2, values.map(_utf8)),
        (
            1,
            st.tuples(values, st.integers(min_value=0, max_value=40)).map(
                lambda p: json.dumps(p[0]).encode()[: p[1]]
            ),
        ),
    )


def bodies(platform: str) -> st.SearchStrategy[bytes]:
    """Any body worth throwing at ``platform``: its own shape, another's, noise."""
    return weighted(
        (6, encoded(SHAPES[platform])),
        (1, encoded(st.one_of(*SHAPES.values()))),
        (1, encoded(jsonish)),
        (1, st.binary(max_size=200)),
    )
