"""Prices and costs: exact to the last digit, None for unknown models."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from agent.models.base import Usage
from agent.models.pricing import (
    PricingError,
    charge,
    cost_decimal,
    cost_usd,
    dearest_price,
    load_prices,
    normalize_model_id,
    request_cost,
)

# modelUsage of a real Claude Code headless result (examples/claude_code_result.json),
# copied here so the test does not depend on files outside the project.
SONNET = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
OPUS = "global.anthropic.claude-opus-4-5-20251101-v1:0"
SONNET_USAGE = Usage(input_tokens=15334, output_tokens=11505, cache_read=1486455, cache_write_5m=59609)
OPUS_USAGE = Usage(input_tokens=2583, output_tokens=113)


@pytest.fixture(scope="module")
def table():
    return load_prices()


def test_golden_claude_code_costs(table):
    assert cost_usd(SONNET, SONNET_USAGE, table) == 0.88804725
    assert cost_usd(OPUS, OPUS_USAGE, table) == 0.01574
    # The source JSON's total_cost_usd is the float sum of the per-model costs ...
    assert cost_usd(SONNET, SONNET_USAGE, table) + cost_usd(OPUS, OPUS_USAGE, table) == 0.9037872499999999
    # ... while the exact total is 0.90378725.
    exact = cost_decimal(SONNET, SONNET_USAGE, table) + cost_decimal(OPUS, OPUS_USAGE, table)
    assert exact == Decimal("0.90378725")
    assert round(float(exact), 8) == 0.90378725


def test_unknown_model_has_no_price(table):
    assert cost_usd("claude-unreleased-9", Usage(input_tokens=1000), table) is None
    assert cost_decimal("my-local-model", Usage(), table) is None


def test_one_hour_cache_writes_and_cache_reads(table):
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000, cache_write_5m=1_000_000,
                  cache_write_1h=1_000_000, cache_read=1_000_000)
    assert cost_decimal("claude-haiku-4-5", usage, table) == Decimal("1") + 5 + Decimal("1.25") + 2 + Decimal("0.10")
    assert cost_usd("claude-sonnet-4-5", Usage(), table) == 0.0


@pytest.mark.parametrize("model_id,key", [
    ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),
    ("global.anthropic.claude-opus-4-5-20251101-v1:0", "claude-opus-4-5"),
    ("eu.anthropic.claude-haiku-4-5-20251001-v1:0", "claude-haiku-4-5"),
    ("anthropic.claude-3-5-haiku-20241022-v1:0", "claude-3-5-haiku"),
    ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
    ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5"),
    ("claude-sonnet-4-5[1m]", "claude-sonnet-4-5"),
    ("anthropic:claude-opus-4-1", "claude-opus-4-1"),
    ("claude-opus-4-1-20250805", "claude-opus-4-1"),
    ("claude-sonnet-4-0", "claude-sonnet-4"),
    ("claude-sonnet-4-20250514", "claude-sonnet-4"),
    ("claude-3-7-sonnet-latest", "claude-3-7-sonnet"),
    ("openai:gpt-4o-2024-08-06", "gpt-4o"),
    ("openai/gpt-4.1-mini", "gpt-4.1-mini"),
    ("Claude-Haiku-4-5", "claude-haiku-4-5"),
])
def test_normalize_model_id(table, model_id, key):
    assert normalize_model_id(model_id) == key
    assert key in table.models


def test_claude_cache_prices_follow_the_published_multipliers(table):
    for key, p in table.models.items():
        if key.startswith("claude-") and key != "claude-3-haiku":  # its list prices are rounded
            assert (p.cache_write_5m, p.cache_write_1h, p.cache_read) == (
                p.input * Decimal("1.25"), p.input * 2, p.input * Decimal("0.1")), key


def test_user_file_extends_and_overrides(tmp_path):
    user = tmp_path / "prices.json"
    user.write_text(json.dumps({"models": {
        "qwen3-coder": {"input": 0, "output": 0},
        "my-model": {"input": 0.5, "output": 1.5, "cache_read": 0.05},
        "claude-sonnet-4-5": {"output": 16},  # partial: the rest stays built in
    }}))
    table = load_prices(user)
    assert cost_usd("qwen3-coder", Usage(input_tokens=10**6), table) == 0.0
    my = table.models["my-model"]
    assert (my.cache_write_5m, my.cache_write_1h, my.cache_read) == (Decimal("0.5"), Decimal("0.5"), Decimal("0.05"))
    assert cost_usd("claude-sonnet-4-5", Usage(input_tokens=10**6, output_tokens=10**6), table) == 19.0
    # a flat mapping without "models" works too
    user.write_text(json.dumps({"_note": "mine", "tiny": {"input": 1, "output": 2}}))
    assert "tiny" in load_prices(user).models


def test_web_searches_are_priced_per_search(table):
    """Anthropic's web search tool and OpenAI's: $10 per 1,000 searches; OpenAI's non-reasoning models are priced at
    web_search_preview's $25, the dearer of their two paths."""
    searched = Usage(input_tokens=1000, output_tokens=100, web_search_requests=3)
    tokens = Usage(input_tokens=1000, output_tokens=100)
    assert request_cost("claude-sonnet-4-6", searched, table) == request_cost("claude-sonnet-4-6", tokens, table) + \
        Decimal("0.03")
    assert request_cost("gpt-5", searched, table) - request_cost("gpt-5", tokens, table) == Decimal("0.03")
    assert request_cost("gpt-4o", searched, table) - request_cost("gpt-4o", tokens, table) == Decimal("0.075")
    assert cost_decimal("claude-haiku-4-5", Usage(web_search_requests=1000), table) == 10


def test_a_long_context_request_is_priced_at_its_tier(table):
    """Sonnet 4/4.5/4.6: a request whose input passes 200k tokens bills all its tokens at $6 / $22.50 (cache
    prices the same multiples); at 200k exactly, and for models without the tier, the standard rates stand."""
    long = Usage(input_tokens=150_000, cache_read=40_000, cache_write_5m=20_000, output_tokens=10_000)  # 210k in
    assert request_cost("claude-sonnet-4-5", long, table) == (150_000 * 6 + 40_000 * Decimal("0.6") + 20_000 *
                                                              Decimal("7.5") + 10_000 * Decimal("22.5")) / 10**6
    assert request_cost("claude-sonnet-4-20250514", long, table) == request_cost("claude-sonnet-4-6", long, table)
    assert request_cost("claude-opus-4-6", Usage(input_tokens=200_001, output_tokens=1000), table) == (
        200_001 * 10 + 1000 * Decimal("37.5")) / 10**6
    at_limit = Usage(input_tokens=200_000, output_tokens=1000)
    assert request_cost("claude-sonnet-4-5", at_limit, table) == (200_000 * 3 + 1000 * 15) / Decimal(10**6)
    assert request_cost("claude-haiku-4-5", long, table) == cost_decimal("claude-haiku-4-5", long, table)
    # usage summed over many requests (a report's modelUsage) is priced at the standard rates
    assert cost_decimal("claude-sonnet-4-5", long, table) < request_cost("claude-sonnet-4-5", long, table)


def test_an_unpriced_model_is_charged_at_the_dearest_price_in_the_table(table):
    dear = dearest_price(table)
    # Opus 4.1's $15 / $75 and $30 1h writes; Opus 4.6's long-context $37.50 is below its $75 output; $25 searches
    assert (dear.input, dear.output, dear.cache_write_1h, dear.web_search_per_1k) == (15, 75, 30, 25)
    usage = Usage(input_tokens=1000, output_tokens=1000, web_search_requests=1)
    assert charge("claude-opus-9-9", usage, table) == (Decimal("0.015") + Decimal("0.075") + Decimal("0.025"), False)
    assert charge("claude-sonnet-4-6", usage, table) == (request_cost("claude-sonnet-4-6", usage, table), True)
    for price in table.models.values():  # never below what any priced model would cost
        assert all(getattr(dear, k) >= getattr(price, k) for k in ("input", "output", "cache_write_5m",
                                                                     "cache_write_1h", "cache_read"))


def test_user_file_sets_search_and_long_context_prices(tmp_path):
    user = tmp_path / "prices.json"
    user.write_text(json.dumps({"models": {
        "my-model": {"input": 1, "output": 2, "web_search_per_1k": 5,
                     "long_context": {"above_input_tokens": 1000, "input": 2, "output": 4}},
        "claude-sonnet-4-5": {"long_context": None},  # partial: no tier, the rest built in
    }}))
    table = load_prices(user)
    assert request_cost("my-model", Usage(input_tokens=1001, web_search_requests=2), table) == \
        Decimal(2002) / 10**6 + Decimal("0.01")
    assert table.models["claude-sonnet-4-5"].long_context is None
    assert table.models["claude-sonnet-4-5"].input == 3


@pytest.mark.parametrize("content,message", [
    ('{"models": {"m": {"input": 1, "output": 1, "long_context": {"input": 2, "output": 2}}}}',
     "above_input_tokens: expected a positive whole number"),
    ('{"models": {"m": {"input": 1, "output": 1, "long_context": {"above_input_tokens": 5, "input": 2}}}}',
     "missing 'output'"),
    ('{"models": {"m": {"input": 1, "output": 1, "long_context": {"above_input_tokens": 5, "input": 2, '
     '"output": 2, "web_search_per_1k": 1}}}}', "unknown price field"),
    ('{"models": {"m": {"input": 1, "output": 1, "long_context": 7}}}', "expected an object"),
])
def test_bad_tier_in_a_user_file_is_a_clear_error(tmp_path, content, message):
    user = tmp_path / "prices.json"
    user.write_text(content)
    with pytest.raises(PricingError, match=message):
        load_prices(user)


@pytest.mark.parametrize("content,message", [
    ("{not json", "not valid JSON"),
    ('{"models": {"m": {"input": 1}}}', "missing 'output'"),
    ('{"models": {"m": {"input": -1, "output": 1}}}', "non-negative"),
    ('{"models": {"m": {"input": "cheap", "output": 1}}}', "expected a number"),
    ('{"models": {"m": {"input": 1, "output": 1, "cache_wrte": 1}}}', "unknown price field"),
    ('[1, 2]', "expected a JSON object"),
])
def test_bad_user_file_is_a_clear_error(tmp_path, content, message):
    user = tmp_path / "prices.json"
    user.write_text(content)
    with pytest.raises(PricingError, match=message):
        load_prices(user)
    with pytest.raises(PricingError, match="cannot read"):
        load_prices(tmp_path / "missing.json")
