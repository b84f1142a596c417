"""`perfagent run TASK`: one contestant on one task, as agent.run.entry runs it for every job of a batch too."""

from __future__ import annotations

import argparse

from rich.console import Console

from agent.agents import AGENT_NAMES, OWN_AGENT
from agent.options import add_run_flags, options_from_args
from agent.run import RunRequest, run_request


def cmd_run(args: argparse.Namespace, out: Console) -> int:
    request = RunRequest(task_file=args.task, agent=args.agent, model=args.model or "", options=options_from_args(args),
                         run_id=args.run_id, job=args.job, out_dir=args.out)
    return run_request(request, out, display="json" if args.json else "quiet" if args.quiet else "summary")


def add(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser("run", help="run the agent on one task")
    r.add_argument("task", help="a task file (TOML)")
    r.add_argument("--agent", default=OWN_AGENT, choices=AGENT_NAMES,
                   help="perfagent: our loop (default); claude-code, codex, mini-swe-agent: that CLI, "
                        "sealed and metered")
    r.add_argument("--model", default=None,
                   help="perfagent: rules (the default: offline, no API key) | anthropic[:MODEL] (default model "
                        "claude-sonnet-4-6) | openai:MODEL | replay:TRAJECTORY.jsonl; an external agent: its model "
                        "(defaults: claude-code claude-sonnet-4-6, codex gpt-5, mini-swe-agent "
                        "anthropic/claude-sonnet-4-6)")
    add_run_flags(r)
    r.add_argument("--run-id", default=None,
                   help="results/<run-id>/ folder name, [A-Za-z0-9][A-Za-z0-9._-]* (default: a new timestamped id)")
    r.add_argument("--job", default=None, help="results sub-folder name (default: the task id)")
    r.add_argument("--out", default=".", help="folder that receives results/ and patches/")
    r.add_argument("--keep-workspace", action="store_true",
                   help="keep the run's temporary working copies (the agent's, the checks') instead of deleting them")
    r.add_argument("--quiet", action="store_true", help="no progress, no summary")
    r.add_argument("--json", action="store_true", help="print report.json to stdout")
    r.set_defaults(func=cmd_run)
