"""Tool rounds within the prompt budget.

The retriever fits a turn's first model call into ``context_budget_tokens``. Each tool
round then adds the model's call and the tools' output to the prompt, and
:class:`ToolBudget` keeps every later call within the same budget:

- the exchange (calls and outputs of all rounds) may take up to half the budget
  (``TOOL_SHARE``); an output that does not fit what is left of it is cut with a
  visible ``[... truncated]`` marker (the tool record keeps it whole);
- once less than ``MIN_OUTPUT_TOKENS`` of that half is left, no more tools are
  offered, so the model has to answer;
- one round runs at most ``MAX_CALLS_PER_ROUND`` calls: the model's further calls of
  that round are left out of the exchange (and not run), since every call that stays
  needs a result, and even a result cut to nothing costs its framing;
- when the prompt and the exchange together exceed the budget, the kernel has the
  retriever rebuild the prompt with the exchange's cost reserved
  (``PromptRequest.reserve_tokens``), so the retriever's own order decides what makes
  room (recalled records first, then older history, ...).

Only the model's own tool-call arguments are never cut (the tool results must answer
them as sent); a call larger than the whole share can still take the prompt over.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from picobot.kernel.tokens import TokenEstimator, message_cost, prompt_cost, truncate_to_tokens
from picobot.llm.base import ChatMessage, ToolCall
from picobot.tools.base import wrap_untrusted

log = logging.getLogger(__name__)

TOOL_SHARE = 2
"""The exchange may take at most ``budget // TOOL_SHARE`` tokens."""

MIN_OUTPUT_TOKENS = 64
"""Below this much room left for the exchange, no further tool round is offered."""

MAX_CALLS_PER_ROUND = 16
"""Tool calls run per round; more (a model looping within one answer) are left out."""


class ToolBudget:
    """One turn's tool exchange and what it costs; ``budget`` None: no limit."""

    def __init__(self, estimator: TokenEstimator, budget: int | None) -> None:
        self._est = estimator
        self._budget = budget
        self._share = None if budget is None else budget // TOOL_SHARE
        self.messages: list[ChatMessage] = []
        self.used = 0
        """Tokens the exchange costs so far."""

    def _add(self, message: ChatMessage) -> ChatMessage:
        self.messages.append(message)
        self.used += prompt_cost(self._est, (message,))
        return message

    def call(self, text: str, calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
        """Add the model's message asking for ``calls``; return the calls to run.

        Those past ``MAX_CALLS_PER_ROUND`` are left out of the message as well, so the
        exchange the model sees next is whole: every call in it has its result.
        """
        if len(calls) > MAX_CALLS_PER_ROUND:
            log.warning(
                "the model asked for %d tool calls in one round; running the first %d",
                len(calls),
                MAX_CALLS_PER_ROUND,
            )
            calls = calls[:MAX_CALLS_PER_ROUND]
        self._add(ChatMessage("assistant", text, tool_calls=calls))
        return calls

    def result(self, call: ToolCall, output: str) -> None:
        """Add a tool's output (untrusted data), cut to what the share has left."""
        text = wrap_untrusted(call.name, output)
        if self._share is not None:
            room = self._share - self.used - message_cost(self._est, "")
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
