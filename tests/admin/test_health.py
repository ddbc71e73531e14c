"""Admin API health check."""

from __future__ import annotations

from tests.admin.helpers import Api


async def test_healthz_is_public(api: Api) -> None:
    async with api.client.get("/healthz") as resp:
        assert resp.status == 200
        body = await resp.json()
    assert body == {"status": "ok", "database": "ok"}
    api.contract.check("GET", "/healthz", 200, resp.content_type, body)


async def test_healthz_is_503_when_the_database_fails(api: Api) -> None:
    await api.runtime.db.close()
    async with api.client.get("/healthz") as resp:
        assert resp.status == 503
        body = await resp.json()
    assert body == {"status": "unavailable", "database": "unavailable"}
    api.contract.check("GET", "/healthz", 503, resp.content_type, body)
