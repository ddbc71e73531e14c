"""Which grants a caller holds: own data automatically, Global only by operator config.

Deny by default: a user id gets a Global grant only when it appears, exactly as
written, in ``[permissions] global_memory_read`` / ``global_memory_write``. No
prefix, case-folding or pattern matching, so a look-alike id never inherits a grant.
"""

from __future__ import annotations

from picobot.access.context import Action, Grant, Scope, own_data_grants
from picobot.config.settings import Settings

CONFIG_GRANT = "config grant"
"""Source recorded on (and logged for) grants that come from the config file."""


def grants_for(user_id: str, settings: Settings) -> frozenset[Grant]:
    """The grants of ``user_id``: Session/User on own data, plus configured Global ones."""
    perms = settings.permissions
    if user_id not in perms.global_memory_read and user_id not in perms.global_memory_write:
        return own_data_grants()  # every turn of most users: no set to build
    grants = set(own_data_grants())
    if user_id in perms.global_memory_read:
        grants.add(Grant(Action.MEMORY_READ, Scope.GLOBAL, CONFIG_GRANT))
    if user_id in perms.global_memory_write:
        grants.add(Grant(Action.MEMORY_WRITE, Scope.GLOBAL, CONFIG_GRANT))
    return frozenset(grants)
