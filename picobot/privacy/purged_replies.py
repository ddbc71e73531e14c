"""The last reply of a purged user: deleted once it is sent or given up on, then erased.

A user who confirms ``/purge user`` on a messaging platform is answered ("Deleted all
data of user ..."), and that answer is queued after the purge, as is any reply of a turn
whose message a purge deleted meanwhile. Such a reply is queued without its user id
(:data:`picobot.store.channels.webhooks.PURGED_USER`) and keeps only what sending it needs: the
chat, the platform's reply target and the text. Once the platform took it, or the
delivery worker gave up on it, :func:`forget_reply` deletes the row and erases what the
delete leaves on disk, as the purge itself did (:func:`picobot.store.erasure.erase.
erase_residue`).

The erasure is recorded like a purge's (``task_runs`` row ``purge-erase``, started
before the row is deleted): if it fails or the process dies in between, the next
retention run erases what was left.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from picobot.store.channels.webhooks import WebhookStore
from picobot.store.erasure.erase import erase_residue
from picobot.store.task_runs import (
    PURGE_ERASE_TASK_NAME,
    RESIDUE_ERASED,
    error_text,
    record_run,
    record_start,
)

log = logging.getLogger(__name__)


async def forget_reply(store: WebhookStore, outbound_id: int, clock: Callable[[], float]) -> None:
    """Delete a purged user's reply (sent or given up on) and erase its bytes.

    A failure to delete raises (the reply stays queued, as when a sent reply cannot be
    marked sent); a failure to erase is logged and left to retention, since the reply
    itself went out (or was given up on) either way.
    """
    db = store.db
    started = clock()
    await record_start(db, PURGE_ERASE_TASK_NAME, started)
    await store.delete_reply(outbound_id)
    error: str | None = None
    try:
        await erase_residue(db)
    except Exception as exc:
        log.exception("could not erase a purged user's last reply; retention erases it")
        error = error_text(exc)
    try:
        await record_run(
            db,
            PURGE_ERASE_TASK_NAME,
            started_at=started,
            finished_at=clock(),
            ok=error is None,
            result=RESIDUE_ERASED if error is None else None,
            error=error,
        )
    except Exception:
        # The row still says unfinished, which the next start's retention run erases.
        log.exception("could not record the erasure of a purged user's last reply")
