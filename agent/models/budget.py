"""What a run has spent on models, and when that is over its budget: one accountant, one rule.

Our loop (agent/run/loop.py) and the relay that meters an external agent (agent/agents/relay.py)
both count a run's answers in a `Spend` and ask `over_budget` whether to stop, so a task's
`budget.max_cost_usd` and `--max-cost` mean the same thing whoever runs the task.

The rule:
- a budget of None or 0 is no budget: the run is never stopped for its cost (0 is what a task
  file or `--max-cost 0` writes for "unlimited"; a budget that allowed no answer at all would
  make a run that can do nothing);
- any other budget is over once the run's cost is more than it; the answer that crosses it is
  counted (it was already paid for), and no further model call is made;
- a model with no price: our loop (a local model the user named, say) reports its cost as null and
  warns, and such a cost spends no budget; the relay, which serves an agent that picks its own
  requests, charges it at the dearest price in the table (`Spend.charge_unpriced`), so its run's
  cost is always a number, compared with the budget as it is, and `unpriced` counts such answers.

Our loop makes one call at a time, so checking before a call and counting after it is enough.
The relay serves an agent that may send many requests at once, so it also reserves each
request's worst case before forwarding it (`fits_budget`): a request whose worst case does not
fit in what is left (the spend so far plus the reservations still open) is refused and stops
the run; the reservation is settled to the metered cost when the answer is counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from agent.models.base import OFFLINE_MODELS, Usage
from agent.models.pricing import PriceTable, charge, request_cost


def has_budget(max_cost_usd: float | None) -> bool:
    """Whether a cost budget limits the run at all: None and 0 do not."""
    return bool(max_cost_usd)


def over_budget(spent_usd: float | None, max_cost_usd: float | None) -> bool:
    """The one budget rule (see the module's docstring): stop once a known cost is past a real budget."""
    return has_budget(max_cost_usd) and spent_usd is not None and spent_usd > max_cost_usd  # type: ignore[operator]


def fits_budget(committed_usd: float, worst_usd: float | None, max_cost_usd: float | None) -> bool:
    """Whether a call that may cost up to `worst_usd` can be made when `committed_usd` (spent plus reserved)
    is already taken: always without a budget or without a known price, else only within the budget."""
    return not has_budget(max_cost_usd) or worst_usd is None or committed_usd + worst_usd <= max_cost_usd  # type: ignore[operator]


@dataclass(kw_only=True)
class Spend:
    """Tokens and their cost per model, and the time spent waiting for answers; not thread-safe."""

    usage_by_model: dict[str, Usage] = field(default_factory=dict)
    cost_by_model: dict[str, float | None] = field(default_factory=dict)  # None: no price known
    api_duration_s: float = 0.0
    charge_unpriced: bool = False  # charge a model with no price at the dearest price in the table (the relay)
    unpriced: int = 0  # answers so charged: their cost is in the total, an upper bound of what they cost
    exact_cost: dict[str, Decimal] = field(default_factory=dict, repr=False)  # per request, summed exactly

    @property
    def total_cost_usd(self) -> float | None:
        """The run's cost; None when any model it used has no known price."""
        costs = list(self.cost_by_model.values())
        return None if any(c is None for c in costs) else sum(costs)  # type: ignore[arg-type]

    def count(self, model: str, usage: Usage, prices: PriceTable, duration_s: float = 0.0) -> float | None:
        """Count one answer of `model`; its own cost (None: no price known). Each answer is priced on its own
        (a long-context tier is per request); an offline model costs nothing."""
        self.usage_by_model[model] = self.usage_by_model.get(model, Usage()) + usage
        self.api_duration_s += duration_s
        cost, priced = self.charge(model, usage, prices)
        self.unpriced += int(cost is not None and not priced)
        known = cost is not None and (model in self.exact_cost or model not in self.cost_by_model)
        if known:
            self.exact_cost[model] = self.exact_cost.get(model, Decimal(0)) + cost  # type: ignore[operator]
            self.cost_by_model[model] = float(self.exact_cost[model])
        else:
            self.exact_cost.pop(model, None)
            self.cost_by_model[model] = None
        return None if cost is None else float(cost)

    def charge(self, model: str, usage: Usage, prices: PriceTable) -> tuple[Decimal | None, bool]:
        """(cost, priced) of one answer: at its model's price; with `charge_unpriced`, a model with no price at
        the dearest price in the table (priced False); else None."""
        if model in OFFLINE_MODELS:
            return Decimal(0), True
        if self.charge_unpriced:
            return charge(model, usage, prices)
        return request_cost(model, usage, prices), True

    def over(self, max_cost_usd: float | None) -> bool:
        return over_budget(self.total_cost_usd, max_cost_usd)
