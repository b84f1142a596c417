"""agent.env's face: its names load lazily (PEP 562), so a module that imports the sandbox loads no workspace.

Where the agent's commands run: a git workspace it cannot subvert, and the sandbox around every command."""

from typing import TYPE_CHECKING

from agent.util.lazy import lazy_names

if TYPE_CHECKING:
    from agent.env.workspace import checked_bases
else:
    __getattr__ = lazy_names(__name__, {"checked_bases": "agent.env.workspace"})

__all__ = ["checked_bases"]
