"""The triggers that keep a per-user revisions table in step with the rows it watches."""

from __future__ import annotations

_CLOCK = "(SELECT value FROM revision_clock WHERE id = 1)"


def revision_triggers(prefix: str, watched: str, revisions: str) -> str:
    """SQL of three triggers: every insert, update or delete of a user's rows of
    ``watched`` moves ``revision_clock`` and gives that user's row of ``revisions`` its
    value; their last delete removes the row (m008, m029). Names are constants."""
    bump = "UPDATE revision_clock SET value = value + 1 WHERE id = 1;"
    set_new = (
        f"INSERT INTO {revisions} (user_id, rev) VALUES (NEW.user_id, {_CLOCK})"  # noqa: S608
        " ON CONFLICT (user_id) DO UPDATE SET rev = excluded.rev;"
    )
    leave_old = (
        f"DELETE FROM {revisions} WHERE user_id = OLD.user_id"  # noqa: S608
        f" AND NOT EXISTS (SELECT 1 FROM {watched} WHERE user_id = OLD.user_id);"
        f" UPDATE {revisions} SET rev = {_CLOCK} WHERE user_id = OLD.user_id;"
    )
    return f"""
        CREATE TRIGGER {prefix}_rev_insert AFTER INSERT ON {watched} BEGIN
            {bump} {set_new}
        END;
        CREATE TRIGGER {prefix}_rev_update AFTER UPDATE ON {watched} BEGIN
            {bump} {set_new} {leave_old}
        END;
        CREATE TRIGGER {prefix}_rev_delete AFTER DELETE ON {watched} BEGIN
            {bump} {leave_old}
        END;
        """


def revisions_table(revisions: str, watched: str) -> str:
    """SQL creating ``revisions`` with a row for every user who has rows of ``watched``."""
    return f"""
        CREATE TABLE {revisions} (
            user_id TEXT PRIMARY KEY,
            rev INTEGER NOT NULL
        ) WITHOUT ROWID;
        INSERT INTO {revisions} (user_id, rev) SELECT DISTINCT user_id, {_CLOCK} FROM {watched};
        """  # noqa: S608
