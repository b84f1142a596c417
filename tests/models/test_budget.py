"""The one budget rule and accountant that our loop and the relay both use."""

from __future__ import annotations

import pytest

from agent.models.base import Usage
from agent.models.budget import Spend, fits_budget, has_budget, over_budget
from agent.models.pricing import cost_usd, load_prices


@pytest.mark.parametrize("budget, spent, over", [
    (None, 100.0, False), (0, 100.0, False), (0.0, 0.01, False),  # None and 0: no budget
    (1.0, 0.5, False), (1.0, 1.0, False), (1.0, 1.01, True),  # over once the cost is more than the budget
    (1.0, None, False),  # an unknown cost never spends a budget
])
def test_the_budget_rule(budget, spent, over):
    assert over_budget(spent, budget) is over
    assert has_budget(budget) is bool(budget)


def test_spend_counts_per_model_and_prices_the_running_total():
    prices = load_prices()
    spend = Spend()
    one = Usage(input_tokens=1000, output_tokens=10)
    assert spend.count("claude-sonnet-4-6", one, prices, 0.5) == cost_usd("claude-sonnet-4-6", one, prices)
    spend.count("claude-sonnet-4-6", one, prices, 0.25)
    assert spend.usage_by_model == {"claude-sonnet-4-6": one + one}
    assert spend.total_cost_usd == cost_usd("claude-sonnet-4-6", one + one, prices)
    assert spend.api_duration_s == 0.75
    assert spend.count("rules", one, prices) == 0.0  # an offline model costs nothing
    assert spend.count("no-such-model", one, prices) is None
    assert spend.total_cost_usd is None and not spend.over(0.000001)


@pytest.mark.parametrize("budget, committed, worst, fits", [
    (None, 100.0, 5.0, True), (0, 100.0, 5.0, True),  # no budget: anything goes
    (1.0, 0.5, 0.5, True), (1.0, 0.5, 0.51, False),  # a reservation must fit in what is left
    (1.0, 0.0, 1.2, False),  # a call that may cost more than the whole budget is never made
    (1.0, 0.9, None, True),  # an unknown price never spends a budget
])
def test_a_reservation_fits_the_budget_or_is_refused(budget, committed, worst, fits):
    assert fits_budget(committed, worst, budget) is fits
