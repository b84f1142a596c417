"""The one error every part of agent.agents raises for the user (its own module: no import cycle)."""

from agent.errors import BadInput


class AgentError(BadInput):
    """An agent that cannot be run (unknown, not installed, wrong version): one line for the user."""
