"""report.json in the exact top-level shape of Claude Code's headless JSON result, plus `evaluation`.

Keeping that shape means tooling that already reads agent results reads ours. Every file
is written to a temporary name and renamed, so a reader never sees half a report.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

from agent.run.loop import Outcome
from agent.models.base import Usage

CONTEXT_WINDOW = 200_000


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def usage_block(total: Usage) -> dict[str, Any]:
    return {
        "input_tokens": total.input_tokens,
        "cache_creation_input_tokens": total.cache_write_5m + total.cache_write_1h,
        "cache_read_input_tokens": total.cache_read,
        "output_tokens": total.output_tokens,
        "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
        "service_tier": "standard",
        "cache_creation": {"ephemeral_1h_input_tokens": total.cache_write_1h,
                           "ephemeral_5m_input_tokens": total.cache_write_5m},
    }


def model_usage_block(usage: Usage, cost: float | None) -> dict[str, Any]:
    return {
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "cacheReadInputTokens": usage.cache_read,
        "cacheCreationInputTokens": usage.cache_write_5m + usage.cache_write_1h,
        "webSearchRequests": 0,
        "costUSD": cost,
        "contextWindow": CONTEXT_WINDOW,
    }


def build_report(outcome: Outcome, *, session_id: str, evaluation: dict[str, Any] | None,
                 permission_denials: list[dict[str, Any]]) -> dict[str, Any]:
    total = sum(outcome.usage_by_model.values(), Usage())
    return {
        "type": "result",
        "subtype": outcome.subtype,
        "is_error": outcome.is_error,
        "duration_ms": round(outcome.duration_s * 1000),
        "duration_api_ms": round(outcome.api_duration_s * 1000),
        "num_turns": outcome.num_turns,
        "result": outcome.result,
        "session_id": session_id,
        "total_cost_usd": outcome.total_cost_usd,
        "usage": usage_block(total),
        "modelUsage": {m: model_usage_block(u, outcome.cost_by_model.get(m))
                       for m, u in outcome.usage_by_model.items()},
        "permission_denials": permission_denials,
        "uuid": str(uuid.uuid4()),
        "evaluation": evaluation,
    }


def write_json(path: Path, data: Any) -> None:
    atomic_write(path, json.dumps(data, indent=2, default=str) + "\n")
