"""An MCP ``search_memory`` call against the same search through the admin API.

Both run in one process on the same corpus copy, each over real HTTP on loopback: the
SDK's client calling ``search_memory`` on ``[channels.mcp]``'s listener (one session
per user, its API key), and ``GET /api/v1/search`` of the admin API with an operator
key. Iteration ``i`` times both for the same user and message text, MCP first on even
``i`` and the admin API first on odd ones, so drift hits both alike. The MCP side ranks
as recall does (matches with the messages around them); the admin API returns plain
matches: the figure is what an MCP client pays over an operator's call for one search.
"""

from __future__ import annotations

import contextlib
import secrets
from typing import Any

import aiohttp
import httpx2
from aiohttp import web
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bench.common import BenchContext
from bench.corpus import user_id
from bench.provider import InstantProvider
from bench.stats import Ticker, dist_ms, now_ns, ratio
from picobot.admin.api import AdminAPI
from picobot.mcp.access import MemoryAccess
from picobot.mcp.http import McpHttp
from picobot.runtime import open_runtime

USERS = 8
"""Users searched (one MCP session each), taken in turn."""
TOP_K = 10


async def mcp_search(ctx: BenchContext) -> dict[str, Any]:
    """p50/p95 of an MCP search call and of the admin API's search, and their ratios."""
    plan = ctx.plan
    total = plan.warmup + plan.recall_iters
    pool = sorted(set(ctx.users(USERS)))
    users = [pool[i % len(pool)] for i in range(total)]
    texts = ctx.gen.texts_for(users)
    admin_key = secrets.token_urlsafe(24)
    keys = {f"bench-mcp-{secrets.token_hex(12)}": user_id(u) for u in pool}
    by_user = {uid: key for key, uid in keys.items()}
    mcp_settings = {"enabled": True, "port": 0, "rate_limit_per_minute": 10**9}
    settings = ctx.settings(channels={"mcp": mcp_settings})
    mcp_ns: list[int] = []
    admin_ns: list[int] = []
    tick = Ticker("mcp_search", total, ctx.progress)
    async with (
        open_runtime(settings, provider=InstantProvider(["ok."])) as rt,
        contextlib.AsyncExitStack() as stack,
    ):
        app = web.Application()
        AdminAPI(rt, [admin_key]).add_routes(app)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        admin_url = f"http://127.0.0.1:{runner.addresses[0][1]}/api/v1/search"
        listener = McpHttp(
            MemoryAccess(settings, rt.db, services=rt.services),
            settings.channels.mcp,
            settings.server,
            keys,
        )
        await listener.start()
        stack.push_async_callback(listener.stop)
        clients: dict[str, Client] = {}
        for uid, key in by_user.items():
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"})
            )
            client = Client(streamable_http_client(listener.url, http_client=http))
            clients[uid] = await stack.enter_async_context(client)
        session = await stack.enter_async_context(
            aiohttp.ClientSession(headers={"Authorization": f"Bearer {admin_key}"})
        )

        async def by_mcp(uid: str, text: str) -> None:
            result = await clients[uid].call_tool("search_memory", {"query": text, "top_k": TOP_K})
            if result.is_error:
                raise RuntimeError(f"search_memory failed: {result.content}")

        async def by_admin(uid: str, text: str) -> None:
            params = {"user": uid, "q": text, "limit": str(TOP_K)}
            async with session.get(admin_url, params=params) as resp:
                resp.raise_for_status()
                await resp.read()

        for i in range(total):
            uid, text = user_id(users[i]), texts[i]
            order = (by_mcp, by_admin) if i % 2 == 0 else (by_admin, by_mcp)
            for side in order:
                start = now_ns()
                await side(uid, text)
                if i >= plan.warmup:
                    (mcp_ns if side is by_mcp else admin_ns).append(now_ns() - start)
            tick.step(i + 1)
    mcp, admin = dist_ms(mcp_ns), dist_ms(admin_ns)
    return {
        "picobot_ms": mcp,
        "raw_ms": admin,
        "p50_ratio": ratio(mcp["p50"], admin["p50"]),
        "p95_ratio": ratio(mcp["p95"], admin["p95"]),
        "users": len(pool),
    }
