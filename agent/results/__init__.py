"""agent.results's face: its names load lazily (PEP 562): the tables' rich and pydantic wait for a summary to show.

What a run leaves and how to read it: below both batch/ (which writes it) and review/ (which shows it)."""

from typing import TYPE_CHECKING

from agent.util.lazy import lazy_names

if TYPE_CHECKING:
    from agent.results.tables import summary_tables
else:
    __getattr__ = lazy_names(__name__, {"summary_tables": "agent.results.tables"})

__all__ = ["summary_tables"]
