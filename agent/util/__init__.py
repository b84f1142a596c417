"""agent.util's face: the generic helpers other packages' faces and the command line take from it.

What is truly generic: atomic files, JSON lines, path globs, text cuts. Imports nothing of `agent`."""

from agent.util.files import atomic_write
from agent.util.lazy import lazy_names
from agent.util.seal import write_sealed
from agent.util.text import strip_controls

__all__ = ["atomic_write", "lazy_names", "strip_controls", "write_sealed"]
