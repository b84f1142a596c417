"""Model providers behind one small protocol (see base.py), chosen by a spec string.

    anthropic                  -> the default Claude model (DEFAULT_ANTHROPIC_MODEL)
    anthropic:<model>          -> Messages API
    openai:<model>             -> chat completions at OPENAI_BASE_URL / base_url
    replay:<trajectory.jsonl>  -> the assistant turns of a recorded run, tools re-run live
    rules                      -> the offline policy (static analyzers + checks), needs the task
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .base import DEFAULT_ANTHROPIC_MODEL, DEFAULT_MAX_RETRIES, Model, ModelError, Reply, ToolCall, Usage
from .replay import ReplayModel

# The provider SDKs take ~2 s to import: they load only when a spec names them, so commands
# that never call a model (tasks, lint, check, review) start fast.

if TYPE_CHECKING:
    from agent.task import Task

__all__ = [
    "DEFAULT_ANTHROPIC_MODEL",
    "DEFAULT_MAX_RETRIES",
    "Model",
    "ModelError",
    "Reply",
    "ToolCall",
    "Usage",
    "make_model",
]


def make_model(
    spec: str,
    *,
    base_url: str | None = None,
    stream: bool = False,
    max_retries: int = DEFAULT_MAX_RETRIES,
    task: "Task | None" = None,
) -> Model:
    """Build the model a spec names; raises ModelError for an unknown spec or missing key."""
    provider, _, name = spec.strip().partition(":")
    name = name.strip()
    if provider == "anthropic":
        from .anthropic import AnthropicModel

        model = name or DEFAULT_ANTHROPIC_MODEL
        return AnthropicModel(model, base_url=base_url, stream=stream, max_retries=max_retries)
    if provider == "openai":
        if not name:
            raise ModelError(f"model spec {spec!r} names no model: use openai:<model>")
        from .openai import OpenAIModel

        return OpenAIModel(name, base_url=base_url, stream=stream, max_retries=max_retries)
    if provider == "replay":
        if not name:
            raise ModelError(f"model spec {spec!r} names no trajectory: use replay:<trajectory.jsonl>")
        return ReplayModel(Path(name))
    if provider == "rules" and not name:
        if task is None:
            raise ModelError("the rules policy needs a task")
        from agent.policies.rules import RulesPolicy

        return RulesPolicy(task)
    raise ModelError(f"unknown model spec {spec!r}: use rules, anthropic[:<model>], openai:<model> or replay:<file>")
