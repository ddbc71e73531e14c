"""The operations the front ends offer, each once.

The chat commands, the admin API, the dashboard and the CLI are front ends: they parse,
authenticate and render, and call the services of :class:`Services` (built once by
:func:`picobot.runtime.build_services` and carried on the runtime) for everything they
do to data: memory notes, learned facts, pins, purges, export, search, sessions and
events. A rule that lives here is applied the same way from every door.
"""
