"""A batch job process: one RunRequest, as JSON, run the way `perfagent run --quiet` runs it.

The fork server's children call `run_json` (locally and on Ray workers alike); a fresh interpreter is
`python -m agent.batch.job <batch pid> <request JSON>`, and dies with the process that started it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console

import agent
from agent.batch.procs import die_with_parent
from agent.run.entry import RunRequest, guarded, run_request


def run_json(request: str) -> int:
    """The job's exit code, as `perfagent run` would give it: report and errors go where a run puts them."""
    def run() -> int:
        req = RunRequest.model_validate_json(request)
        # Which task file and harness the job runs, first in its log: under Ray, the copies shipped to the worker
        print(f"starting: task {req.task_file}, harness {Path(agent.__file__).parent}", flush=True)
        return run_request(req, Console(emoji=False), display="log")

    return guarded(run)


def main(argv: list[str]) -> int:
    die_with_parent(int(argv[0]))
    return run_json(argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
