"""A batch job process: one RunRequest, as JSON, run the way `perfagent run --quiet` runs it.

The fork server's children call `run_json`; a fresh interpreter (the Ray path) is
`python -m agent.batch.job <batch pid> <request JSON>`, and dies with the process that started it.
"""

from __future__ import annotations

import sys

from rich.console import Console

from agent.batch.procs import die_with_parent
from agent.run.entry import RunRequest, guarded, run_request


def run_json(request: str) -> int:
    """The job's exit code, as `perfagent run` would give it: report and errors go where a run puts them."""
    return guarded(lambda: run_request(RunRequest.model_validate_json(request), Console(), display="log"))


def main(argv: list[str]) -> int:
    die_with_parent(int(argv[0]))
    return run_json(argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
