"""Services: every operation a front end offers, built once per database."""

from __future__ import annotations

from dataclasses import dataclass

from picobot.services.events import EventService
from picobot.services.export import ExportService
from picobot.services.facts import FactService
from picobot.services.notes import NoteService
from picobot.services.pins import PinService
from picobot.services.preferences import PreferenceService
from picobot.services.purges import PurgeService
from picobot.services.search import SearchService
from picobot.services.sessions import SessionService


@dataclass(frozen=True, slots=True)
class Services:
    """The services of one runtime (see :mod:`picobot.services`)."""

    notes: NoteService
    facts: FactService
    pins: PinService
    purges: PurgeService
    export: ExportService
    search: SearchService
    sessions: SessionService
    events: EventService
    preferences: PreferenceService
