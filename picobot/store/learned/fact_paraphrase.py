"""Paraphrases of known facts: "the user likes X" reinforces "User prefers X".

Reinforcement counts observations, not wordings. Before :meth:`FactStore.observe`
writes, :meth:`FactParaphrases.match` embeds the new observations together with the
user's active facts of the same categories (the most confident first, at most
``MAX_KNOWN``) and maps each observation that says an active fact again in other
words (:func:`picobot.store.learned.fact_rules.is_paraphrase`) to that fact. Nothing is stored: the
vectors live for the call only. Without an embedding model, or when it fails, facts
match by text as before.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from picobot.errors import LLMError
from picobot.store.db import Database
from picobot.store.learned.fact_rules import Observation, is_paraphrase, same_text
from picobot.store.learned.facts import Fact, active_facts

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

log = logging.getLogger(__name__)

MAX_KNOWN = 200
"""Most known facts compared with one batch of observations."""

Embed = Callable[[Sequence[str]], Awaitable["npt.NDArray[np.float32]"]]
"""Texts to unit-length vectors (an embedder's ``embed``)."""


class FactParaphrases:
    """Finds the active fact an observation restates; see the module docstring."""

    def __init__(self, embed: Embed, *, threshold: float = 0.9) -> None:
        self._embed = embed
        self.threshold = threshold

    async def match(
        self, db: Database, user_id: str, observations: Sequence[Observation]
    ) -> dict[int, int]:
        """``{index of an observation: id of the active fact it restates}``."""
        known = await db.read(lambda conn: active_facts(conn, user_id, 0.0, MAX_KNOWN))
        categories = {o.category for o in observations}
        known = [f for f in known if f.category in categories]
        # Exact restatements reinforce by text already (FactStore._observe_one).
        pending = [
            i
            for i, o in enumerate(observations)
            if not any(f.category == o.category and same_text(f.text, o.text) for f in known)
        ]
        if not known or not pending:
            return {}
        texts = [observations[i].text for i in pending] + [f.text for f in known]
        try:
            vectors = await self._embed(texts)
        except LLMError as exc:
            log.warning("facts: paraphrases not checked (%s)", exc)
            return {}
        sims = vectors[: len(pending)] @ vectors[len(pending) :].T
        found: dict[int, int] = {}
        for row, i in enumerate(pending):
            best = self._best(observations[i], known, [float(s) for s in sims[row]])
            if best is not None:
                found[i] = best.id
        return found

    def _best(self, obs: Observation, known: list[Fact], sims: list[float]) -> Fact | None:
        ranked = sorted(zip(sims, known, strict=True), key=lambda p: -p[0])
        for sim, fact in ranked:
            if fact.category == obs.category and is_paraphrase(
                fact.text, obs.text, sim, self.threshold
            ):
                return fact
        return None
