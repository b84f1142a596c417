"""`replay:<trajectory.jsonl>`: the assistant turns of a recorded run, played back in order.

Only the model's side is replayed; tool results are recomputed live, so a replay re-applies
the edits and re-runs the checks. A replay spends nothing, so its usage is zero.
"""

from __future__ import annotations

import json
from pathlib import Path

from .base import ModelError, Reply, ToolCall, Usage

REPLAY_MODEL_ID = "replay"


def load_turns(path: Path) -> list[dict]:
    """The recorded `response` records of a trajectory, in order."""
    if not path.is_file():
        raise ModelError(f"replay: trajectory not found: {path}")
    turns = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise ModelError(f"replay: {path}:{n}: not a JSON line") from None
        if record.get("type") == "response":
            turns.append(record)
    if not turns:
        raise ModelError(f"replay: {path} holds no model responses")
    return turns


class ReplayModel:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.name = f"replay:{self.path}"
        self._turns = load_turns(self.path)
        self._next = 0

    def complete(self, system: str, messages: list[dict], tools: list[dict]) -> Reply:
        if self._next >= len(self._turns):
            raise ModelError(f"replay: the recording has no more turns ({len(self._turns)} replayed)")
        rec = self._turns[self._next]
        self._next += 1
        calls = [ToolCall(c["id"], c["name"], c.get("input") or {}, c.get("error")) for c in rec.get("tool_calls", [])]
        return Reply(text=rec.get("text", ""), tool_calls=calls, usage=Usage(), api_duration_s=0.0,
                     model=REPLAY_MODEL_ID, stop_reason=rec.get("stop_reason", "tool_use"),
                     raw={"replayed_from": str(self.path), "turn": self._next, "recorded_model": rec.get("model")})
