"""Per-model token prices and the cost of one request's Usage, in exact decimal arithmetic.

Prices live in pricing.json (USD per million tokens; server-side web searches per 1,000; a
long-context tier where a provider bills a request with a long input at higher rates); a user
JSON file of the same shape extends or overrides them. An unknown model costs ``None`` here,
never a guessed price: our loop warns, and the relay, which must never lose its budget to a
model the table lacks, charges it at `dearest_price` instead. Decimal arithmetic makes a cost
match a provider's bill to the last digit.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields
from decimal import Decimal, InvalidOperation
from pathlib import Path

from .base import Usage
from agent.errors import BadInput

BUILTIN_PRICES = Path(__file__).with_name("pricing.json")
PER_TOKENS = Decimal(1_000_000)
PER_SEARCHES = Decimal(1_000)
TOKEN_FIELDS = ("input", "output", "cache_write_5m", "cache_write_1h", "cache_read")
USAGE_FIELDS = {"input": "input_tokens", "output": "output_tokens", "cache_write_5m": "cache_write_5m",
                "cache_write_1h": "cache_write_1h", "cache_read": "cache_read"}
# A model entry that names no web search price: both providers' published standard rate, $10 per 1,000.
DEFAULT_WEB_SEARCH_PER_1K = Decimal(10)


class PricingError(BadInput, ValueError):
    """A price file that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class Price:
    """USD per million tokens for each kind of token, per 1,000 server-side web searches, and the
    long-context tier a request whose input passes its threshold is billed at instead (None: none)."""

    input: Decimal
    output: Decimal
    cache_write_5m: Decimal
    cache_write_1h: Decimal
    cache_read: Decimal
    web_search_per_1k: Decimal = DEFAULT_WEB_SEARCH_PER_1K
    long_context: LongContext | None = None


@dataclass(frozen=True)
class LongContext:
    """Anthropic bills every token of a request whose input (uncached, cache writes and reads together)
    is over `above_input_tokens` at these rates, not just the tokens past it."""

    above_input_tokens: int
    price: Price


@dataclass(frozen=True)
class PriceTable:
    """Prices keyed by normalized model id."""

    models: dict[str, Price]

    def lookup(self, model_id: str) -> Price | None:
        key = model_id.strip().lower()
        return self.models.get(key) or self.models.get(normalize_model_id(model_id))


_PROVIDER_PREFIX = re.compile(r"^(?:anthropic|openai)[:/]")
_BEDROCK_PREFIX = re.compile(r"^(?:[a-z]{2,6}\.)?anthropic\.")  # us. eu. apac. global.
_SUFFIXES = [
    re.compile(r"\[[^\]]*\]$"),        # Claude Code's context tag: claude-sonnet-4-5[1m]
    re.compile(r"-v\d+(?::\d+)?$"),    # Bedrock version: -v1:0
    re.compile(r":\d+$"),              # Bedrock throughput suffix alone
    re.compile(r"@(?:\d{8}|latest)$"), # Vertex: claude-sonnet-4-5@20250929
    re.compile(r"-\d{8}$"),            # Anthropic snapshot date: -20250929
    re.compile(r"-\d{4}-\d{2}-\d{2}$"),# OpenAI snapshot date: -2024-08-06
    re.compile(r"-latest$"),
]
_ZERO_MINOR = re.compile(r"^(claude-(?:opus|sonnet|haiku)-\d+)-0$")  # claude-sonnet-4-0 alias


def normalize_model_id(model_id: str) -> str:
    """Map provider-prefixed, dated, Bedrock or Vertex ids to the bare family id.

    'us.anthropic.claude-sonnet-4-5-20250929-v1:0' -> 'claude-sonnet-4-5'
    """
    s = _PROVIDER_PREFIX.sub("", model_id.strip().lower())
    s = _BEDROCK_PREFIX.sub("", s)
    for pattern in _SUFFIXES:
        s = pattern.sub("", s)
    return _ZERO_MINOR.sub(r"\1", s)


def _decimal(value: object, where: str) -> Decimal:
    if isinstance(value, bool):
        raise PricingError(f"{where}: expected a number, got {value!r}")
    try:
        d = Decimal(str(value))
    except InvalidOperation:
        raise PricingError(f"{where}: expected a number, got {value!r}") from None
    if not d.is_finite() or d < 0:
        raise PricingError(f"{where}: expected a non-negative number, got {value!r}")
    return d


def _parse_price(entry: object, base: Price | None, where: str) -> Price:
    """A full entry, or a partial one over `base`; a new model's cache prices default to input."""
    if not isinstance(entry, dict):
        raise PricingError(f"{where}: expected an object of prices, got {entry!r}")
    names = [f.name for f in fields(Price)]
    unknown = sorted(set(entry) - set(names))
    if unknown:
        raise PricingError(f"{where}: unknown price field(s) {', '.join(unknown)}; known: {', '.join(names)}")
    values = {k: _decimal(v, f"{where}.{k}") for k, v in entry.items() if k != "long_context"}
    tier = _parse_tier(entry["long_context"], f"{where}.long_context") if "long_context" in entry else None
    if base is not None:
        return Price(**{n: values.get(n, getattr(base, n)) for n in names if n != "long_context"},
                     long_context=tier if "long_context" in entry else base.long_context)
    for required in ("input", "output"):
        if required not in values:
            raise PricingError(f"{where}: missing {required!r} price")
    return Price(**{n: values.get(n, values["input"]) for n in TOKEN_FIELDS},
                 web_search_per_1k=values.get("web_search_per_1k", DEFAULT_WEB_SEARCH_PER_1K), long_context=tier)


def _parse_tier(entry: object, where: str) -> LongContext | None:
    """{"above_input_tokens": N, "input": ..., "output": ..., cache prices}; null: no tier."""
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise PricingError(f"{where}: expected an object, got {entry!r}")
    above = entry.get("above_input_tokens")
    if isinstance(above, bool) or not isinstance(above, int) or above <= 0:
        raise PricingError(f"{where}.above_input_tokens: expected a positive whole number, got {above!r}")
    prices = {k: v for k, v in entry.items() if k != "above_input_tokens"}
    unknown = sorted(set(prices) - set(TOKEN_FIELDS))
    if unknown:
        raise PricingError(f"{where}: unknown price field(s) {', '.join(unknown)}; known: above_input_tokens, "
                           f"{', '.join(TOKEN_FIELDS)}")
    return LongContext(above, _parse_price(prices, None, where))


def _read_models(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(), parse_float=Decimal)
    except OSError as err:
        raise PricingError(f"{path}: cannot read: {err.strerror or err}") from None
    except json.JSONDecodeError as err:
        raise PricingError(f"{path}: not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise PricingError(f"{path}: expected a JSON object")
    models = data.get("models", {k: v for k, v in data.items() if not k.startswith("_")})
    if not isinstance(models, dict):
        raise PricingError(f"{path}: 'models' must be an object")
    return models


def load_prices(user_file: Path | None = None) -> PriceTable:
    """The built-in table, extended or overridden by `user_file` (same JSON shape)."""
    table: dict[str, Price] = {}
    for path in [BUILTIN_PRICES] + ([Path(user_file)] if user_file is not None else []):
        for model_id, entry in _read_models(path).items():
            key = model_id.strip().lower()
            table[key] = _parse_price(entry, table.get(key), f"{path.name}: {model_id}")
    return PriceTable(models=table)


def input_side(usage: Usage) -> int:
    """A request's whole input, as a long-context threshold counts it: uncached, written and read from cache."""
    return usage.input_tokens + usage.cache_write_5m + usage.cache_write_1h + usage.cache_read


def tier_for(price: Price, usage: Usage) -> Price:
    """The token prices one request is billed at: its long-context tier's once its input is past the threshold."""
    long = price.long_context
    return long.price if long is not None and input_side(usage) > long.above_input_tokens else price


def price_cost(price: Price, usage: Usage, one_request: bool = True) -> Decimal:
    """Exact USD cost of `usage` at `price`: its tokens at their rates, plus its searches; with `one_request`, at
    its long-context tier's rates when its input passes the threshold."""
    rates = tier_for(price, usage) if one_request else price
    tokens = sum((getattr(usage, USAGE_FIELDS[n]) * getattr(rates, n) for n in TOKEN_FIELDS), Decimal(0))
    return tokens / PER_TOKENS + usage.web_search_requests * price.web_search_per_1k / PER_SEARCHES


def request_cost(model_id: str, usage: Usage, table: PriceTable) -> Decimal | None:
    """Exact USD cost of one request's `usage` on `model_id` (a long-context tier applies to a request), or None
    if the model has no known price."""
    price = table.lookup(model_id)
    return None if price is None else price_cost(price, usage)


def cost_decimal(model_id: str, usage: Usage, table: PriceTable) -> Decimal | None:
    """Exact USD cost of `usage` on `model_id` at its standard rates (usage summed over requests, such as a
    report's `modelUsage`, cannot tell which passed a long-context threshold: `request_cost` can), or None if
    the model has no known price."""
    price = table.lookup(model_id)
    return None if price is None else price_cost(price, usage, one_request=False)


def dearest_price(table: PriceTable) -> Price:
    """Each kind of token (and search) at the highest price any model in `table` has for it, long-context tiers
    included: what an unpriced model's request is charged at, so it can never cost less than it might."""
    every = [p for price in table.models.values() for p in (price, price.long_context.price if price.long_context
                                                            else None) if p is not None]
    if not every:
        raise PricingError("the price table is empty: nothing to charge an unpriced model at")
    return Price(**{n: max(getattr(p, n) for p in every) for n in (*TOKEN_FIELDS, "web_search_per_1k")})


def charge(model_id: str, usage: Usage, table: PriceTable) -> tuple[Decimal, bool]:
    """(cost, priced) of one request: at its model's price, else (priced False) at `dearest_price`."""
    cost = request_cost(model_id, usage, table)
    return (cost, True) if cost is not None else (price_cost(dearest_price(table), usage), False)


def cost_usd(model_id: str, usage: Usage, table: PriceTable) -> float | None:
    """`cost_decimal` as a float (the report's JSON number), or None for an unknown model."""
    cost = cost_decimal(model_id, usage, table)
    return None if cost is None else float(cost)
