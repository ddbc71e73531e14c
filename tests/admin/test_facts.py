"""Admin API learned facts: list with filters and paging, show with history and sources,
create, change, delete, and the two-step bulk delete (a purge of scope ``facts``)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any
from urllib.parse import quote

import pytest

from picobot.privacy.export import iter_user_jsonl
from picobot.store.learned.fact_rules import Observation
from tests.admin.helpers import ALICE, BOB, KEY_A, KEY_B, Api

OPERATOR_A = f"api:{KEY_A[:8]}"
FACTS = "/api/v1/facts"


async def _session(api: Api, user: str) -> str:
    sessions = await api.call("GET", f"/api/v1/sessions?user={user}")
    return str(sessions["sessions"][0]["id"])


@pytest.fixture
async def learned(chatted: Api) -> dict[str, int]:
    """Alice: tea (learned twice), trip (plan), a weak one; Bob: his sister."""
    store = chatted.runtime.services.facts.store
    now = chatted.clock.now
    alice = await _session(chatted, ALICE)
    tea, trip = await store.observe(
        ALICE,
        [
            Observation("tea", "preference", "likes green tea"),
            Observation("trip", "plan", "Japan in May"),
        ],
        session_id=alice,
        message_id=1,
        now=now,
    )
    await store.observe(
        ALICE,
        [Observation("tea", "preference", "Likes green tea.")],
        session_id=alice,
        message_id=3,
        now=now + 1,
    )
    [sister] = await store.observe(
        BOB,
        [Observation("ann", "relationship", "Ann is his sister")],
        session_id=await _session(chatted, BOB),
        message_id=2,
        now=now,
    )
    weak = await store.create(
        ALICE, Observation(None, "plan", "maybe learn Rust"), confidence=0.2, actor="x", now=now
    )
    return {"tea": tea.fact_id, "trip": trip.fact_id, "sister": sister.fact_id, "weak": weak.id}


async def _ids(api: Api, query: str = "") -> list[int]:
    page = await api.call("GET", f"{FACTS}?{query}")
    return [f["id"] for f in page["facts"]]


# --- reading ------------------------------------------------------------------------------


async def test_filters_never_mix_users(chatted: Api, learned: dict[str, int]) -> None:
    ids = learned
    assert await _ids(chatted) == sorted(ids.values(), reverse=True)
    assert set(await _ids(chatted, f"user={ALICE}")) == {ids["tea"], ids["trip"], ids["weak"]}
    bob = await chatted.call("GET", f"{FACTS}?user={quote(BOB)}")
    assert [(f["id"], f["user_id"]) for f in bob["facts"]] == [(ids["sister"], BOB)]
    assert await _ids(chatted, f"user={quote(BOB)}&category=preference") == []
    assert await _ids(chatted, "subject=TEA") == [ids["tea"]]
    assert await _ids(chatted, "category=plan") == [ids["weak"], ids["trip"]]
    assert await _ids(chatted, "active=false") == [ids["weak"]]
    assert await _ids(chatted, "min_confidence=0.75") == [ids["tea"]]
    assert await _ids(chatted, "max_confidence=0.5") == [ids["weak"]]
    assert await _ids(chatted, "min_confidence=0.6&max_confidence=0.7") == [
        ids["sister"],
        ids["trip"],
    ]
    assert await _ids(chatted, "text=JAPAN") == [ids["trip"]]
    assert await _ids(chatted, "text=%25") == []  # no wildcard
    assert await _ids(chatted, "pinned=true") == []


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("category=hobby", "invalid_parameter"),
        ("min_confidence=1.5", "invalid_parameter"),
        ("max_confidence=-0.1", "invalid_parameter"),
        ("min_confidence=0.8&max_confidence=0.2", "invalid"),
        ("active=maybe", "invalid_parameter"),
        ("user=", "invalid_parameter"),
        ("cursor=abc", "invalid_parameter"),
        ("limit=0", "invalid_parameter"),
    ],
)
async def test_bad_filters_are_refused_not_read_as_nothing(
    chatted: Api, learned: dict[str, int], query: str, code: str
) -> None:
    error = await chatted.call("GET", f"{FACTS}?{query}", expect=400)
    assert error["error"]["code"] == code
    if query.startswith("category"):
        assert "must be one of 'preference', 'personal', 'plan'" in error["error"]["message"]


async def test_paging_neither_repeats_nor_skips_when_facts_arrive(
    chatted: Api, learned: dict[str, int]
) -> None:
    first = await chatted.call("GET", f"{FACTS}?limit=3")
    assert len(first["facts"]) == 3 and first["limit"] == 3
    # A fact created between the pages is newer: it does not shift the next page.
    await chatted.call(
        "POST",
        FACTS,
        body={"user_id": BOB, "category": "event", "text": "moved house"},
        expect=201,
    )
    second = await chatted.call("GET", f"{FACTS}?limit=3&cursor={first['next_cursor']}")
    assert second["next_cursor"] is None
    seen = [f["id"] for f in first["facts"] + second["facts"]]
    assert seen == sorted(learned.values(), reverse=True)


async def test_show_has_sources_and_history(chatted: Api, learned: dict[str, int]) -> None:
    shown = await chatted.call("GET", f"{FACTS}/{learned['tea']}")
    assert shown["fact"]["confidence"] == pytest.approx(0.8)
    assert [s["message_id"] for s in shown["sources"]] == [1, 3]
    assert all(s["session_id"] for s in shown["sources"])
    assert [h["reason"] for h in shown["history"]] == ["extracted", "reinforced"]
    for missing in ("999999", "abc", "0", "-1", "1e3"):
        error = await chatted.call("GET", f"{FACTS}/{missing}", expect=404)
        assert error["error"]["code"] == "not_found"


# --- writing ------------------------------------------------------------------------------


async def test_create_change_pin_and_delete_record_the_operator(chatted: Api) -> None:
    made = await chatted.call(
        "POST",
        FACTS,
        body={"user_id": ALICE, "category": "plan", "subject": " Trip ", "text": "Lisbon  in June"},
        expect=201,
    )
    assert (made["user_id"], made["subject"], made["text"]) == (ALICE, "trip", "Lisbon in June")
    assert made["confidence"] == 0.7 and made["active"] and not made["pinned"]
    path = f"{FACTS}/{made['id']}"
    changed = await chatted.call("PATCH", path, body={"text": "Porto in June", "confidence": 0.2})
    # A confidence below the threshold deactivates, unless active says otherwise.
    assert changed["text"] == "Porto in June" and not changed["active"]
    kept = await chatted.call("PATCH", path, body={"active": True}, key=KEY_B)
    assert kept["active"] and kept["confidence"] == 0.2
    pinned = await chatted.call("PATCH", path, body={"pinned": True})
    assert pinned["pinned"]
    history = (await chatted.call("GET", path))["history"]
    assert [(h["reason"], h["actor"]) for h in history] == [
        ("operator", OPERATOR_A),
        ("operator", OPERATOR_A),
        ("operator", f"api:{KEY_B[:8]}"),
        ("pinned", OPERATOR_A),
    ]
    assert (history[1]["old_text"], history[1]["new_text"]) == ("Lisbon in June", "Porto in June")
    sources = (await chatted.call("GET", path))["sources"]
    assert [(s["session_id"], s["message_id"]) for s in sources] == [(None, None)]
    # The user's export carries the fact with its sources and history.
    exported = [json.loads(line) async for line in iter_user_jsonl(chatted.runtime.db, ALICE)]
    [fact] = [r for r in exported if r["type"] == "fact"]
    assert fact["id"] == made["id"] and fact["pinned"]
    assert [h["actor"] for h in fact["history"]][-1] == OPERATOR_A
    assert fact["sources"] == [{"session_id": None, "message_id": None, **fact["sources"][0]}]
    chatted.clock.now += 100
    await chatted.call("DELETE", path, expect=204)
    await chatted.call("GET", path, expect=404)
    events = await chatted.call("GET", "/api/v1/events?type=fact.deleted")
    [deleted] = events["events"]
    # The operator deleted it (null would say the user did), at the API's clock.
    assert deleted["actor"] == OPERATOR_A and deleted["payload"]["fact_id"] == made["id"]
    at = dt.datetime.fromisoformat(deleted["at"]).timestamp()
    assert at == pytest.approx(chatted.clock.now, abs=0.01)  # not the wall clock: 100 s off
    await chatted.call("DELETE", path, expect=404)
    await chatted.call("PATCH", path, body={"active": False}, expect=404)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"user_id": ALICE, "category": "hobby", "text": "x"}, "invalid_field"),
        ({"user_id": ALICE, "category": "Plan", "text": "x"}, "invalid_field"),
        ({"user_id": ALICE, "category": "plan", "text": "x", "confidence": 1.5}, "invalid_field"),
        ({"user_id": ALICE, "category": "plan", "text": "x", "confidence": "1"}, "invalid_field"),
        ({"user_id": ALICE, "category": "plan", "text": "  \u200b "}, "invalid"),
        ({"user_id": ALICE, "category": "plan"}, "missing_field"),
        ({"user_id": ALICE, "category": "plan", "text": "x", "pinned": True}, "unknown_field"),
    ],
)
async def test_create_refuses_bad_facts(chatted: Api, body: dict[str, Any], code: str) -> None:
    error = await chatted.call("POST", FACTS, body=body, expect=400)
    assert error["error"]["code"] == code
    assert await _ids(chatted) == []


async def test_a_long_text_is_cut_as_everywhere(chatted: Api, learned: dict[str, int]) -> None:
    words = " ".join(f"w{i}" for i in range(60))
    made = await chatted.call(
        "POST", FACTS, body={"user_id": BOB, "category": "knowledge", "text": words}, expect=201
    )
    assert made["text"].split() == [f"w{i}" for i in range(40)]
    assert made["confidence"] == 0.7
    made = await chatted.call(
        "POST",
        FACTS,
        body={"user_id": BOB, "category": "knowledge", "text": "x", "confidence": 1},
        expect=201,
    )
    assert made["confidence"] == 1.0
    path = f"{FACTS}/{learned['trip']}"
    changed = await chatted.call("PATCH", path, body={"text": words})
    assert len(changed["text"].split()) == 40
    for body, code in (
        ({}, "invalid"),
        ({"text": None}, "invalid"),
        ({"confidence": -0.5}, "invalid_field"),
        ({"active": "yes"}, "invalid_field"),
        ({"text": ""}, "invalid"),
    ):
        error = await chatted.call("PATCH", path, body=body, expect=400)
        assert error["error"]["code"] == code, body
    assert (await chatted.call("GET", path))["fact"]["text"] == changed["text"]


# --- bulk delete: a purge of chosen facts ---------------------------------------------------


async def _plan(api: Api, body: dict[str, Any], key: str = KEY_A) -> dict[str, Any]:
    planned: dict[str, Any] = await api.call(
        "POST", "/api/v1/purge", body={"scope": "facts", **body}, key=key
    )
    return planned


async def test_bulk_delete_takes_exactly_the_counted_facts(
    chatted: Api, learned: dict[str, int]
) -> None:
    planned = await _plan(chatted, {"user": ALICE, "category": "plan"})
    plan = planned["plan"]
    assert plan["counts"]["facts"] == 2 and plan["users"] == 1
    # The recall index entry of the active one goes too (inactive facts have none).
    assert plan["counts"]["index_entries"] == 1
    assert "2 chosen learned facts of 1 user" in plan["prompt"]
    # A matching fact learned after the plan is not part of it.
    late = await chatted.call(
        "POST",
        FACTS,
        body={"user_id": ALICE, "category": "plan", "text": "visit Rome"},
        expect=201,
    )
    token = planned["confirm_token"]
    done = await chatted.call("POST", f"/api/v1/purge/{token}/confirm", body={"answer": "y"})
    assert done["deleted"]["facts"] == 2
    assert set(await _ids(chatted)) == {learned["tea"], learned["sister"], late["id"]}
    # Single use.
    await chatted.call("POST", f"/api/v1/purge/{token}/confirm", body={"answer": "y"}, expect=404)


async def test_bulk_delete_by_ids_across_users(chatted: Api, learned: dict[str, int]) -> None:
    chosen = [learned["tea"], learned["sister"], 999_999]
    planned = await _plan(chatted, {"ids": chosen})
    assert planned["plan"]["counts"]["facts"] == 2 and planned["plan"]["users"] == 2
    # Ids and criteria together: both must match.
    narrowed = await _plan(chatted, {"ids": chosen, "user": BOB})
    assert narrowed["plan"]["counts"]["facts"] == 1 and narrowed["plan"]["users"] == 1
    # The new plan replaced the first one of the same key.
    first = f"/api/v1/purge/{planned['confirm_token']}/confirm"
    await chatted.call("POST", first, body={"answer": "y"}, expect=404)
    path = f"/api/v1/purge/{narrowed['confirm_token']}/confirm"
    # Another key's token is unknown to this one; "n" cancels.
    await chatted.call("POST", path, body={"answer": "y"}, key=KEY_B, expect=404)
    assert await chatted.call("POST", path, body={"answer": "n"}) == {"cancelled": True}
    assert len(await _ids(chatted)) == 4


async def test_bulk_delete_refuses_expired_and_empty_choices(
    chatted: Api, learned: dict[str, int]
) -> None:
    planned = await _plan(chatted, {"text": "tea"})
    chatted.clock.now += 61
    path = f"/api/v1/purge/{planned['confirm_token']}/confirm"
    error = await chatted.call("POST", path, body={"answer": "y"}, expect=410)
    assert error["error"]["code"] == "expired"
    assert len(await _ids(chatted)) == 4
    error = await chatted.call("POST", "/api/v1/purge", body={"scope": "facts"}, expect=400)
    assert "at least one filter" in error["error"]["message"]
    nothing = await _plan(chatted, {"user": BOB, "category": "plan"})
    assert nothing["confirm_token"] is None and nothing["plan"]["counts"]["total"] == 0
    for body in ({"ids": [0]}, {"ids": ["1"]}, {"category": "hobby"}, {"user_id": ALICE}):
        await chatted.call("POST", "/api/v1/purge", body={"scope": "facts", **body}, expect=400)


@pytest.mark.parametrize(
    ("body", "accepted"),
    [
        ({"scope": "facts", "ids": [1, 2]}, True),
        ({"scope": "facts", "category": "plan", "min_confidence": 0.5}, True),
        ({"scope": "facts", "category": "hobby"}, False),
        ({"scope": "facts", "ids": [0]}, False),
        ({"scope": "facts", "max_confidence": 2}, False),
        ({"scope": "facts", "user_id": ALICE}, False),
        ({"scope": "facts", "active": "true"}, False),
    ],
)
async def test_the_documented_facts_purge_body_is_the_servers_rule(
    chatted: Api, body: dict[str, Any], accepted: bool
) -> None:
    operation = chatted.contract.operation("POST", "/api/v1/purge")
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    assert chatted.contract.validator(schema).is_valid(body) == accepted
    # Planning deletes nothing; nothing matches here, so there is no token.
    planned = await chatted.call(
        "POST", "/api/v1/purge", body=body, expect=200 if accepted else 400
    )
    assert not accepted or planned["confirm_token"] is None


@pytest.mark.parametrize(
    ("name", "value", "accepted"),
    [
        ("category", "plan", True),
        ("category", "Plan", False),
        ("min_confidence", 1.0, True),
        ("min_confidence", 1.01, False),
        ("cursor", "12", True),
        ("cursor", "012", False),
        ("limit", 201, False),
    ],
)
async def test_the_documented_fact_parameters_are_the_servers_rule(
    chatted: Api, name: str, value: Any, accepted: bool
) -> None:
    params = {p["name"]: p for p in chatted.contract.operation("GET", FACTS)["parameters"]}
    validator = chatted.contract.validator(params[name]["schema"])
    assert validator.is_valid(value) == accepted
    await chatted.call("GET", f"{FACTS}?{name}={value}", expect=200 if accepted else 400)
