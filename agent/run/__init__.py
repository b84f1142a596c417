"""agent.run's face: the entry the command line calls, and the one place a perfagent error meets the user.

One run of one agent on one task: the loop, its tools and prompts, the runner that grades and writes report.json."""

from agent.run.entry import RunRequest, UserError, guarded, run_request

__all__ = ["RunRequest", "UserError", "guarded", "run_request"]
