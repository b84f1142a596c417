"""External coding agents (Claude Code, Codex, mini-swe-agent) run sealed, metered on the wire.

A run names an agent and a model: `--agent claude-code --model claude-sonnet-4-5`. Inside a
batch, where one list names every contestant, the two are one spec, "<agent>:<model>"
(`claude-code:claude-sonnet-4-5`); a spec whose prefix is no agent's name is a model of our
own loop (`rules`, `anthropic:claude-sonnet-4-6`, `openai:gpt-4o`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.agents.errors import AgentError

if TYPE_CHECKING:
    from agent.agents.base import ExternalAgent

OWN_AGENT = "perfagent"  # our loop, with a model spec as --model takes it
# name -> "module:class"; imported only when used, so `perfagent run` with our loop loads none.
EXTERNAL_AGENTS = {
    "claude-code": "agent.agents.claude_code:ClaudeCode",
    "codex": "agent.agents.codex:Codex",
    "mini-swe-agent": "agent.agents.mini_swe_agent:MiniSweAgent",
}
AGENT_NAMES = (OWN_AGENT, *EXTERNAL_AGENTS)
# Not an agent we run: another harness's patch, graded as it is (`check --predictions`), named in a batch as
# "prediction:<model_name_or_path>".
PREDICTION = "prediction"
__all__ = ["AGENT_NAMES", "EXTERNAL_AGENTS", "OWN_AGENT", "PREDICTION", "AgentError", "join_spec", "make_agent",
           "split_spec"]


def split_spec(spec: str) -> tuple[str, str]:
    """("claude-code", "claude-sonnet-4-5") for "claude-code:claude-sonnet-4-5"; (OWN_AGENT, spec) otherwise."""
    name, sep, model = spec.strip().partition(":")
    if name in EXTERNAL_AGENTS or (name == PREDICTION and sep):
        return name, model.strip()
    if name == OWN_AGENT and sep:
        return OWN_AGENT, model.strip()
    return OWN_AGENT, spec.strip()


def join_spec(agent: str, model: str) -> str:
    """The one-string spec of (agent, model): the model alone for our loop."""
    return model if agent == OWN_AGENT else f"{agent}:{model}" if model else agent


def make_agent(name: str, model: str = "") -> "ExternalAgent":
    """The external agent `name` for `model` (its default when empty); AgentError if unknown."""
    import importlib

    if name not in EXTERNAL_AGENTS:
        raise AgentError(f"unknown agent {name!r}: expected one of {', '.join(AGENT_NAMES)}")
    module, _, cls = EXTERNAL_AGENTS[name].partition(":")
    return getattr(importlib.import_module(module), cls)(model)
