"""The body of the prompt's ``<data source="learned_facts">`` block (pure rendering).

The prompt builder fetches the facts in its read snapshot with
:func:`picobot.store.learned.facts.active_facts` and passes them here with its budget. The
output depends only on the facts given (their order, text, subject, category and
confidence) and the budget, so consecutive turns whose facts did not change render the
same bytes and a model server's prefix cache keeps working.
"""

from __future__ import annotations

from collections.abc import Sequence

from picobot.store.learned.facts import Fact
from picobot.text.tokens import TokenEstimator
from picobot.text.untrusted import escape_data, one_line

GENERAL = "general"
"""The group of facts with no subject."""


def _ordered(facts: Sequence[Fact]) -> list[Fact]:
    # The same order as active_facts, whatever order the caller passes.
    return sorted(facts, key=lambda f: (-f.confidence, -f.updated_at, -f.id))


def fact_line(fact: Fact) -> str:
    """One fact as one escaped line: ``- (0.80) [preference] likes green tea``."""
    text = one_line(escape_data(fact.text))
    return f"- ({fact.confidence:.2f}) [{fact.category}] {text}"


def _group_line(subject: str | None) -> str:
    return f"{one_line(escape_data(subject)) if subject else GENERAL}:"


def _render(chosen: list[Fact], total: int, estimator: TokenEstimator) -> str:
    groups: dict[str | None, list[str]] = {}
    for fact in chosen:  # most confident first, so groups keep their best fact's rank
        groups.setdefault(fact.subject, []).append(fact_line(fact))
    lines: list[str] = []
    for subject, items in groups.items():
        lines.append(_group_line(subject))
        lines.extend(items)
    body = "\n".join(lines)
    header = f"{len(chosen)} of {total} facts, ~{estimator.estimate(body)} tokens"
    return f"{header}\n{body}"


def render_facts_block(facts: Sequence[Fact], estimator: TokenEstimator, budget_tokens: int) -> str:
    """The block body for ``facts`` within ``budget_tokens``; empty when none fits.

    Facts are taken most confident first (ties: most recently updated, then newest);
    one that does not fit what is left is skipped and smaller ones may still fit. The
    chosen facts are grouped by subject (``general`` for none), each group in the rank
    of its best fact. The header says ``N of M facts, ~T tokens``: N listed of the M
    given, T the estimated tokens of the listing. Each fact is one line with its data
    tags neutralized, so stored text cannot close the block or pose as another item.
    """
    ordered = _ordered(facts)
    # A header as long as it can get, so the sum below never undercounts it.
    used = estimator.estimate(f"{len(ordered)} of {len(ordered)} facts, ~{budget_tokens} tokens")
    chosen: list[Fact] = []
    groups: set[str | None] = set()
    for fact in ordered:
        cost = estimator.estimate(fact_line(fact)) + 1
        if fact.subject not in groups:
            cost += estimator.estimate(_group_line(fact.subject)) + 1
        if used + cost <= budget_tokens:
            chosen.append(fact)
            groups.add(fact.subject)
            used += cost
    # The sum of the parts is an estimate; the rendered text is what must fit.
    while chosen:
        text = _render(chosen, len(ordered), estimator)
        if estimator.estimate(text) <= budget_tokens:
            return text
        chosen.pop()
    return ""
