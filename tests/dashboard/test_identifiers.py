"""Identifiers that hide characters are shown with them: a user id, chat id, session
channel or memory key holding a bidi override, an isolate or a zero-width character is
rendered with that character as a marked ``\\uXXXX`` (``generic:\\u202enimda`` never
reads as ``generic:admin``), on every page that shows it, and the raw character is left
only where a form must send it back."""

from __future__ import annotations

import re
import time
import unicodedata

import pytest

from picobot.dashboard.render import hidden, ident, ident_text
from picobot.messages import Identity, Inbound
from picobot.store.conversation.memories import MemoryRepo
from picobot.store.learned.fact_rules import observation
from picobot.store.learned.fact_writes import FactStore
from tests.dashboard.conftest import Local, http_session, log_in

SPOOF = "generic:\u202enimda"
CHAT = "\u2066chat\u200b42\u2069"
KEY = "pet\ufeff"
HIDING = [
    *[chr(c) for c in range(0x202A, 0x202F)],
    *[chr(c) for c in range(0x2066, 0x206A)],
    *[chr(c) for c in range(0x200B, 0x2010)],
    "\ufeff",
    "\u00ad",  # soft hyphen
    "\u2060",  # word joiner
    "\u061c",  # Arabic letter mark
    "\U000e0041",  # a tag character
    "\u3164",  # Hangul filler (a letter that draws nothing)
    "\u00a0",  # no-break space
    "\x1b",
    "\u2028",
]
VALUE = re.compile(r'value="[^"]*"')


@pytest.mark.parametrize("char", HIDING, ids=lambda c: f"U+{ord(c):04X}")
def test_each_hiding_character_is_shown_escaped_and_marked(char: str) -> None:
    assert hidden(char)
    shown = str(ident(f"a{char}b"))
    code = f"{ord(char):04X}" if ord(char) < 0x10000 else f"{ord(char):08X}"
    assert char not in shown
    assert f">\\{'u' if ord(char) < 0x10000 else 'U'}{code}</span>" in shown
    assert shown.startswith('a<span class="hidden-char" title="U+') and shown.endswith("b")
    assert char not in ident_text(f"a{char}b")


def test_plain_identifiers_are_unchanged_and_markup_is_escaped() -> None:
    for plain in ("telegram:42", "whatsapp:15551234567@s.whatsapp.net", "ws:Zoë Ünal", "用户"):
        assert str(ident(plain)) == plain.replace("&", "&amp;")
    assert str(ident('<b a="1">&')) == "&lt;b a=&#34;1&#34;&gt;&amp;"
    assert str(ident(SPOOF)) == (
        'generic:<span class="hidden-char" title="U+202E RIGHT-TO-LEFT OVERRIDE">'
        "\\u202E</span>nimda"
    )
    assert not any(hidden(c) for c in "abc 123 :@._-é")
    assert all(unicodedata.category(c) != "Cf" or hidden(c) for c in map(chr, range(0x3000)))


async def test_pages_show_hidden_characters_of_identifiers_marked(local: Local) -> None:
    db = local.runtime.db
    fact = observation("tea", "knowledge", "likes tea")
    await FactStore(db).create(SPOOF, fact, confidence=0.9, actor="t", now=time.time())
    await MemoryRepo(db).save(SPOOF, KEY, "a cat", max_count=50, actor="t")
    turn = Inbound(Identity("generic", SPOOF, CHAT), "hello")
    [session] = {e.session_id async for e in local.runtime.kernel.handle(turn) if e.session_id}
    async with http_session() as http:
        csrf = await log_in(http, local.base)
        pages = {}
        for path in (
            "/admin/",
            "/admin/facts",
            "/admin/sessions",
            f"/admin/sessions/{session}",
            "/admin/memories/delete?user=generic%3A%E2%80%AEnimda&key=pet%EF%BB%BF",
        ):
            async with http.get(local.base + path) as resp:
                assert resp.status == 200, path
                pages[path] = await resp.text()
        purge = {"csrf_token": csrf, "scope": "user", "target": SPOOF}
        async with http.post(f"{local.base}/admin/purge", data=purge) as resp:
            pages["purge"] = await resp.text()
    marked = 'generic:<span class="hidden-char" title="U+202E RIGHT-TO-LEFT OVERRIDE">'
    for path, page in pages.items():
        assert marked + "\\u202E</span>nimda" in page, path
        # The raw characters are only in what a form sends back.
        shown = VALUE.sub("", page)
        assert not [c for c in shown if hidden(c) and c not in " \n\t\r"], path
    timeline = pages[f"/admin/sessions/{session}"]
    assert (
        '\\u2066</span>chat<span class="hidden-char" title="U+200B ZERO WIDTH SPACE">' in timeline
    )
    assert "\\uFEFF</span>" in pages["/admin/facts"]  # the memory key
