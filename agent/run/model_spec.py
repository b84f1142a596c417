"""The model a spec string names: a provider (agent.models) or the offline rules policy.

    anthropic                  -> the default Claude model (DEFAULT_ANTHROPIC_MODEL)
    anthropic:<model>          -> Messages API
    openai:<model>             -> chat completions at OPENAI_BASE_URL / base_url
    replay:<trajectory.jsonl>  -> the assistant turns of a recorded run, tools re-run live
    rules                      -> the offline policy (static analyzers + checks), needs the task

It lives here, not in agent.models, because it knows the policies too: providers never import them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agent.models.base import DEFAULT_ANTHROPIC_MODEL, DEFAULT_MAX_RETRIES, Model, ModelError
from agent.models.replay import ReplayModel

if TYPE_CHECKING:
    from agent.task import Task


def make_model(
    spec: str,
    *,
    base_url: str | None = None,
    stream: bool = False,
    max_retries: int = DEFAULT_MAX_RETRIES,
    task: "Task | None" = None,
) -> Model:
    """Build the model a spec names; raises ModelError for an unknown spec or missing key.

    The provider SDKs take ~2 s to import: they load only when a spec names them, so commands
    that never call a model (tasks, lint, check, review) start fast.
    """
    provider, name = check_spec(spec)
    if provider == "anthropic":
        from agent.models.anthropic import AnthropicModel

        return AnthropicModel(name or DEFAULT_ANTHROPIC_MODEL, base_url=base_url, stream=stream,
                              max_retries=max_retries)
    if provider == "openai":
        from agent.models.openai import OpenAIModel

        return OpenAIModel(name, base_url=base_url, stream=stream, max_retries=max_retries)
    if provider == "replay":
        return ReplayModel(Path(name))
    if task is None:
        raise ModelError("the rules policy needs a task")
    from agent.policies.rules import RulesPolicy

    return RulesPolicy(task)


def check_spec(spec: str) -> tuple[str, str]:
    """(provider, model name) of a spec our loop can run; ModelError for one it cannot, found without
    building anything (a batch checks every spec before it plans a job)."""
    provider, _, name = spec.strip().partition(":")
    name = name.strip()
    if provider == "openai" and not name:
        raise ModelError(f"model spec {spec!r} names no model: use openai:<model>")
    if provider == "replay" and not name:
        raise ModelError(f"model spec {spec!r} names no trajectory: use replay:<trajectory.jsonl>")
    if provider not in ("anthropic", "openai", "replay") and not (provider == "rules" and not name):
        raise ModelError(f"unknown model spec {spec!r}: use rules, anthropic[:<model>], openai:<model> or "
                         "replay:<file>")
    return provider, name
