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


def test_the_relays_spend_charges_an_unpriced_model_at_the_dearest_price_and_keeps_its_budget():
    """One answer of a model the table lacks must not make the spend unknown (and so every budget moot): it is
    charged at the table's dearest prices, counted in `unpriced`, and the budget is compared with the sum."""
    prices = load_prices()
    spend = Spend(charge_unpriced=True)
    one = Usage(input_tokens=1000, output_tokens=1000)
    assert spend.count("claude-opus-9-9", one, prices) == pytest.approx(0.015 + 0.075)  # $15 / $75 per million
    assert spend.unpriced == 1 and spend.total_cost_usd == pytest.approx(0.09)
    spend.count("claude-sonnet-4-6", Usage(output_tokens=80_000), prices)  # $1.20
    assert spend.unpriced == 1 and spend.total_cost_usd == pytest.approx(1.29)
    assert spend.over(1.0) and not spend.over(2.0)
    assert spend.cost_by_model == {"claude-opus-9-9": pytest.approx(0.09), "claude-sonnet-4-6": pytest.approx(1.2)}


def test_each_answer_is_priced_on_its_own_so_a_long_context_tier_applies_per_request():
    prices = load_prices()
    spend = Spend()
    half = Usage(input_tokens=150_000)  # two requests of 150k: neither past Sonnet's 200k threshold
    spend.count("claude-sonnet-4-5", half, prices)
    spend.count("claude-sonnet-4-5", half, prices)
    assert spend.total_cost_usd == pytest.approx(0.90)  # $3 per million, not the long-context $6
    spend.count("claude-sonnet-4-5", Usage(input_tokens=250_000), prices)
    assert spend.total_cost_usd == pytest.approx(0.90 + 1.50)  # this one past it: $6 per million
