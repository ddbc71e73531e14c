"""Admin API retention status and the two-step purge."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import quote

import pytest

from picobot.store.erasure.export import count_user_data
from picobot.store.task_runs import (
    ERASE_TASK_NAME,
    PURGE_ERASE_TASK_NAME,
    RESIDUE_WAITING,
    record_run,
)
from picobot.tasks.retention import RetentionTask
from tests.admin.helpers import (
    ALICE,
    BOB,
    DAY,
    KEY_B,
    Api,
    users,
)

# --- retention -----------------------------------------------------------------------------


async def test_retention_config_last_run_and_expired_now(chatted: Api) -> None:
    before = await chatted.call("GET", "/api/v1/retention")
    assert before["config"] == {
        "max_age_days": 90,
        "cleanup_interval_secs": 3600,
        "erase_interval_secs": 86_400,
        "batch_size": 500,
    }
    assert before["scheduled"] is True  # the runtime runs the retention job
    assert before["expired_now"]["total"] == 0
    # 100 days later, every message has expired; memories never do.
    chatted.clock.now += 100 * DAY
    later = await chatted.call("GET", "/api/v1/retention")
    assert later["expired_now"]["messages"] == 6 and later["expired_now"]["memories"] == 0
    cutoff = datetime.fromisoformat(later["cutoff"]).timestamp()
    assert cutoff == pytest.approx(chatted.clock.now - 90 * DAY)
    report = await RetentionTask(chatted.runtime.db, max_age_days=90, clock=chatted.clock).run()
    after = await chatted.call("GET", "/api/v1/retention")
    run = after["last_run"]
    assert run["ok"] is True and run["unfinished"] is False and run["error"] is None
    assert datetime.fromisoformat(run["finished_at"]).timestamp() == pytest.approx(
        chatted.clock.now
    )
    assert "6 messages" in run["result"]
    assert report.counts.messages == 6 and report.erased
    assert after["expired_now"]["total"] == 0
    erased = after["erasure"]
    assert datetime.fromisoformat(erased["last_erased_at"]).timestamp() == pytest.approx(
        chatted.clock.now
    )
    assert erased["residue_waiting_since"] is None and erased["erase_due"] is None


async def test_retention_shows_residue_waiting_for_its_erasure(chatted: Api) -> None:
    now = chatted.clock.now
    await record_run(
        chatted.runtime.db,
        ERASE_TASK_NAME,
        started_at=now - 600,
        finished_at=now - 3600,
        ok=True,
        result=RESIDUE_WAITING,
    )
    got = (await chatted.call("GET", "/api/v1/retention"))["erasure"]
    assert got.pop("purge_residue_since") is None
    assert {k: datetime.fromisoformat(v).timestamp() for k, v in got.items()} == {
        "last_erased_at": pytest.approx(now - 3600),
        "residue_waiting_since": pytest.approx(now - 600),
        "erase_due": pytest.approx(now - 3600 + 86_400),
    }
    # A purge whose erasure failed: retention's next run erases what it left.
    await record_run(
        chatted.runtime.db,
        PURGE_ERASE_TASK_NAME,
        started_at=now - 60,
        finished_at=now - 50,
        ok=False,
        error="StoreUnavailable: disk full",
    )
    got = (await chatted.call("GET", "/api/v1/retention"))["erasure"]
    assert datetime.fromisoformat(got["purge_residue_since"]).timestamp() == pytest.approx(now - 60)


async def test_retention_shows_a_failed_run(chatted: Api) -> None:
    await record_run(
        chatted.runtime.db,
        "retention",
        started_at=chatted.clock.now,
        finished_at=chatted.clock.now + 1,
        ok=False,
        error="StoreUnavailable: disk full",
    )
    run = (await chatted.call("GET", "/api/v1/retention"))["last_run"]
    assert run["ok"] is False and run["error"] == "StoreUnavailable: disk full"
    assert run["result"] is None


# --- purge ----------------------------------------------------------------------------------


async def test_purge_user_two_step(chatted: Api) -> None:
    db = chatted.runtime.db
    stored = await count_user_data(db, ALICE)
    planned = await chatted.call("POST", "/api/v1/purge", body={"scope": "user", "user_id": ALICE})
    counts = planned["plan"]["counts"]
    assert planned["plan"]["scope"] == "user" and planned["plan"]["user_id"] == ALICE
    assert counts["sessions"] == stored.sessions == 2
    assert counts["messages"] == stored.messages
    assert counts["memories"] == stored.memories == 1
    assert f"{stored.messages} messages" in planned["plan"]["prompt"]
    token = planned["confirm_token"]
    confirm = f"/api/v1/purge/{token}/confirm"
    # Another operator key cannot confirm it: the same answer as an unknown token.
    other = await chatted.call("POST", confirm, key=KEY_B, body={"answer": "y"}, expect=404)
    unknown = await chatted.call(
        "POST", "/api/v1/purge/nope/confirm", body={"answer": "y"}, expect=404
    )
    assert other == unknown
    assert (await count_user_data(db, ALICE)).messages == stored.messages
    done = await chatted.call("POST", confirm, body={"answer": "YES"})
    assert done["deleted"] == counts
    assert (await count_user_data(db, ALICE)).empty
    assert not (await count_user_data(db, BOB)).empty
    await chatted.call("POST", confirm, body={"answer": "y"}, expect=404)  # single use
    await chatted.call("GET", users(ALICE) + "/export", expect=404)


@pytest.mark.parametrize("answer", ["n", "no", "", "s", "yes please"])
async def test_purge_anything_but_yes_cancels(chatted: Api, answer: str) -> None:
    planned = await chatted.call("POST", "/api/v1/purge", body={"scope": "user", "user_id": BOB})
    token = planned["confirm_token"]
    result = await chatted.call("POST", f"/api/v1/purge/{token}/confirm", body={"answer": answer})
    assert result == {"cancelled": True}
    assert (await count_user_data(chatted.runtime.db, BOB)).messages == 2
    await chatted.call("POST", f"/api/v1/purge/{token}/confirm", body={"answer": "y"}, expect=404)


async def test_purge_session_scope(chatted: Api) -> None:
    listing = await chatted.call("GET", f"/api/v1/sessions?user={quote(ALICE)}")
    sid = listing["sessions"][0]["id"]
    planned = await chatted.call(
        "POST", "/api/v1/purge", body={"scope": "session", "session_id": sid}
    )
    assert planned["plan"]["counts"]["sessions"] == 1
    assert planned["plan"]["counts"]["memories"] == 0
    token = planned["confirm_token"]
    done = await chatted.call("POST", f"/api/v1/purge/{token}/confirm", body={"answer": "y"})
    assert done["deleted"] == planned["plan"]["counts"]
    await chatted.call("GET", f"/api/v1/sessions/{sid}", expect=404)
    remaining = await chatted.call("GET", f"/api/v1/sessions?user={quote(ALICE)}")
    assert len(remaining["sessions"]) == 1
    missing = await chatted.call(
        "POST", "/api/v1/purge", body={"scope": "session", "session_id": sid}, expect=404
    )
    assert missing["error"]["code"] == "not_found"


async def test_purge_older_than_uses_the_clock_and_keeps_memories(chatted: Api) -> None:
    recent = await chatted.call("POST", "/api/v1/purge", body={"scope": "older_than", "days": 5})
    assert recent["confirm_token"] is None and recent["expires_at"] is None
    assert recent["plan"]["counts"]["total"] == 0
    chatted.clock.now += 10 * DAY
    planned = await chatted.call("POST", "/api/v1/purge", body={"scope": "older_than", "days": 5})
    assert planned["plan"]["counts"]["messages"] == 6
    assert planned["plan"]["counts"]["memories"] == 0
    token = planned["confirm_token"]
    done = await chatted.call("POST", f"/api/v1/purge/{token}/confirm", body={"answer": "y"})
    assert done["deleted"] == planned["plan"]["counts"]
    memories = await chatted.call("GET", users(ALICE) + "/memories")
    assert [m["key"] for m in memories["memories"]] == ["food"]


async def test_purge_token_expires(chatted: Api) -> None:
    planned = await chatted.call("POST", "/api/v1/purge", body={"scope": "user", "user_id": BOB})
    expires = datetime.fromisoformat(planned["expires_at"]).timestamp()
    assert expires == pytest.approx(chatted.clock.now + 60)
    chatted.clock.now += 61
    token = planned["confirm_token"]
    error = await chatted.call(
        "POST", f"/api/v1/purge/{token}/confirm", body={"answer": "y"}, expect=410
    )
    assert error["error"]["code"] == "expired"
    assert (await count_user_data(chatted.runtime.db, BOB)).messages == 2
    await chatted.call("POST", f"/api/v1/purge/{token}/confirm", body={"answer": "y"}, expect=404)


async def test_another_keys_plan_keeps_an_expired_token_expired(chatted: Api) -> None:
    planned = await chatted.call(
        "POST", "/api/v1/purge", key=KEY_B, body={"scope": "user", "user_id": BOB}
    )
    chatted.clock.now += 61
    # Key A planning anything (here: nothing to delete) must not turn B's 410 into a 404.
    await chatted.call("POST", "/api/v1/purge", body={"scope": "user", "user_id": "nobody:1"})
    await chatted.call("POST", "/api/v1/purge", body={"scope": "user", "user_id": ALICE})
    error = await chatted.call(
        "POST",
        f"/api/v1/purge/{planned['confirm_token']}/confirm",
        key=KEY_B,
        body={"answer": "y"},
        expect=410,
    )
    assert error["error"]["code"] == "expired"
    assert (await count_user_data(chatted.runtime.db, BOB)).messages == 2


async def test_a_new_plan_replaces_the_keys_previous_one(chatted: Api) -> None:
    first = await chatted.call("POST", "/api/v1/purge", body={"scope": "user", "user_id": BOB})
    other = await chatted.call(
        "POST", "/api/v1/purge", key=KEY_B, body={"scope": "user", "user_id": ALICE}
    )
    await chatted.call("POST", "/api/v1/purge", body={"scope": "user", "user_id": ALICE})
    await chatted.call(
        "POST", f"/api/v1/purge/{first['confirm_token']}/confirm", body={"answer": "y"}, expect=404
    )
    # Key B's pending plan is its own and survives key A's new one.
    result = await chatted.call(
        "POST",
        f"/api/v1/purge/{other['confirm_token']}/confirm",
        key=KEY_B,
        body={"answer": "n"},
    )
    assert result == {"cancelled": True}


@pytest.mark.parametrize(
    "body",
    [
        {"scope": "everything"},
        {"scope": "user"},
        {"scope": "user", "user_id": ALICE, "days": 3},
        {"scope": "older_than", "days": 0},
        {"scope": "older_than", "days": 36_501},
        {"scope": "older_than", "days": True},
        {"scope": "older_than", "days": "5"},
        {"scope": "session", "session_id": "x", "force": True},
        {},
    ],
)
async def test_purge_request_validation(chatted: Api, body: dict[str, Any]) -> None:
    error = await chatted.call("POST", "/api/v1/purge", body=body, expect=400)
    assert error["error"]["code"] in (
        "invalid_field",
        "missing_field",
        "unknown_field",
    )


async def test_confirm_needs_an_answer(chatted: Api) -> None:
    planned = await chatted.call("POST", "/api/v1/purge", body={"scope": "user", "user_id": BOB})
    path = f"/api/v1/purge/{planned['confirm_token']}/confirm"
    await chatted.call("POST", path, body={}, expect=400)
    await chatted.call("POST", path, body={"answer": True}, expect=400)
    # A malformed answer consumed nothing: the plan still confirms.
    result = await chatted.call("POST", path, body={"answer": "y"})
    assert result["deleted"]["messages"] == 2


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"scope": "everything"},
            "Field 'scope' must be one of 'session', 'user', 'older_than', 'facts', 'message'.",
        ),
        ({"scope": "older_than", "days": 0}, "Field 'days' must be at least 1."),
        ({"scope": "user", "user_id": ALICE, "days": 3}, "Unknown field(s): days."),
        ({"user_id": ALICE}, "Missing field(s): scope."),
    ],
)
async def test_purge_errors_name_the_field(
    chatted: Api, body: dict[str, Any], message: str
) -> None:
    error = await chatted.call("POST", "/api/v1/purge", body=body, expect=400)
    assert error["error"]["message"] == message
