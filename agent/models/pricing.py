"""Per-model token prices and the cost of a Usage, in exact decimal arithmetic.

Prices live in pricing.json (USD per million tokens); a user JSON file of the same shape
extends or overrides them. An unknown model costs ``None``, never a guessed price: the
caller warns. Decimal arithmetic makes a cost match a provider's bill to the last digit.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, fields
from decimal import Decimal, InvalidOperation
from pathlib import Path

from .base import Usage

BUILTIN_PRICES = Path(__file__).with_name("pricing.json")
PER_TOKENS = Decimal(1_000_000)


class PricingError(ValueError):
    """A price file that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class Price:
    """USD per million tokens for each kind of token."""

    input: Decimal
    output: Decimal
    cache_write_5m: Decimal
    cache_write_1h: Decimal
    cache_read: Decimal


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
    values = {k: _decimal(v, f"{where}.{k}") for k, v in entry.items()}
    if base is not None:
        return Price(**{n: values.get(n, getattr(base, n)) for n in names})
    for required in ("input", "output"):
        if required not in values:
            raise PricingError(f"{where}: missing {required!r} price")
    return Price(**{n: values.get(n, values["input"]) for n in names})


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


def cost_decimal(model_id: str, usage: Usage, table: PriceTable) -> Decimal | None:
    """Exact USD cost of `usage` on `model_id`, or None if the model has no known price."""
    price = table.lookup(model_id)
    if price is None:
        return None
    total = (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_write_5m * price.cache_write_5m
        + usage.cache_write_1h * price.cache_write_1h
        + usage.cache_read * price.cache_read
    )
    return total / PER_TOKENS


def cost_usd(model_id: str, usage: Usage, table: PriceTable) -> float | None:
    """`cost_decimal` as a float (the report's JSON number), or None for an unknown model."""
    cost = cost_decimal(model_id, usage, table)
    return None if cost is None else float(cost)
