"""Tool rounds within the prompt budget.

The retriever fits a turn's first model call into ``context_budget_tokens``. Each tool
round then adds the model's call and the tools' output to the prompt, and
:class:`ToolBudget` keeps every later call within the same budget:

- the exchange (calls and outputs of all rounds) may take up to half the budget
  (``TOOL_SHARE``); an output that does not fit what is left of it is cut with a
  visible ``[... truncated]`` marker (the tool record keeps it whole);
- once less than ``MIN_OUTPUT_TOKENS`` of that half is left, no more tools are
  offered, so the model has to answer;
- every call needs a result, and even a result cut to nothing costs its framing: so a
  round keeps the model's first call and then only as many more (at most
  ``MAX_CALLS_PER_ROUND`` in all) as the share has room for with their results cut
  to nothing, and each output is cut to leave that room for the results still to
  come. The calls left out are left out of the exchange too (and not run), so what
  the model sees next is whole;
- when the prompt and the exchange together exceed the budget, the kernel has the
  retriever rebuild the prompt with the exchange's cost reserved
  (``PromptRequest.reserve_tokens``), so the retriever's own order decides what makes
  room (recalled records first, then older history, ...).

Only the model's own tool-call arguments are never cut (the tool results must answer
them as sent); a first call larger than the whole share can still take the prompt over.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from picobot.llm.base import ChatMessage, ToolCall
from picobot.text.tokens import (
    TRUNCATED,
    TokenEstimator,
    message_cost,
    prompt_cost,
    truncate_to_tokens,
)
from picobot.tools.base import wrap_untrusted

log = logging.getLogger(__name__)

TOOL_SHARE = 2
"""The exchange may take at most ``budget // TOOL_SHARE`` tokens."""

MIN_OUTPUT_TOKENS = 64
"""Below this much room left for the exchange, no further tool round is offered."""

MAX_CALLS_PER_ROUND = 16
"""Tool calls run per round at most (also without a budget): more are left out."""


class ToolBudget:
    """One turn's tool exchange and what it costs; ``budget`` None: no limit."""

    def __init__(self, estimator: TokenEstimator, budget: int | None) -> None:
        self._est = estimator
        self._budget = budget
        self._share = None if budget is None else budget // TOOL_SHARE
        self.messages: list[ChatMessage] = []
        self.used = 0
        """Tokens the exchange costs so far."""
        # Kept free for the results the round's calls still await, at their least.
        self._awaited = 0

    def _add(self, message: ChatMessage) -> ChatMessage:
        self.messages.append(message)
        self.used += prompt_cost(self._est, (message,))
        return message

    def _least_result(self, call: ToolCall) -> int:
        """What ``call``'s result costs at the least: framing and the cut marker."""
        frame = self._est.estimate(wrap_untrusted(call.name, ""))
        return message_cost(self._est, "") + frame + self._est.estimate(TRUNCATED)

    def _round_cost(self, text: str, calls: tuple[ToolCall, ...]) -> int:
        asking = prompt_cost(self._est, (ChatMessage("assistant", text, tool_calls=calls),))
        return asking + sum(self._least_result(c) for c in calls)

    def call(self, text: str, calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
        """Add the model's message asking for ``calls``; return the calls to run.

        The first call always runs; each further one only while the share holds the
        round with every result cut to nothing (and ``MAX_CALLS_PER_ROUND`` at most).
        The others are left out of the message too: every call in it gets a result.
        """
        kept = 1
        limit = min(len(calls), MAX_CALLS_PER_ROUND)
        while kept < limit and (
            self._share is None
            or self._round_cost(text, calls[: kept + 1]) <= self._share - self.used
        ):
            kept += 1
        if kept < len(calls):
            log.warning(
                "the model asked for %d tool calls in one round; running %d", len(calls), kept
            )
        self._add(ChatMessage("assistant", text, tool_calls=calls[:kept]))
        self._awaited = sum(self._least_result(c) for c in calls[:kept])
        return calls[:kept]

    def result(self, call: ToolCall, output: str) -> None:
        """Add a tool's output (untrusted data), cut to what the share has left once the
        results still awaited have their least."""
        text = wrap_untrusted(call.name, output)
        self._awaited -= self._least_result(call)
        if self._share is not None:
            room = self._share - self.used - self._awaited - message_cost(self._est, "")
            if self._est.estimate(text) > room:
                frame = self._est.estimate(wrap_untrusted(call.name, ""))
                cut = truncate_to_tokens(self._est, output, max(0, room - frame))
                text = wrap_untrusted(call.name, cut)
        self._add(ChatMessage("tool", text, tool_call_id=call.id))

    @property
    def open(self) -> bool:
        """Whether another round may offer tools."""
        return self._share is None or self._share - self.used >= MIN_OUTPUT_TOKENS

    def overflows(self, prompt: Sequence[ChatMessage]) -> bool:
        """Whether ``prompt`` plus the exchange exceeds the budget."""
        if self._budget is None or not self.messages:
            return False
        return prompt_cost(self._est, prompt) + self.used > self._budget
