"""`perfagent review`, `runs`, `report`, `compare`: a results folder read back (agent.review), in the terminal,
as JSON or as one HTML page."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from agent.options import at_least
from agent.run import UserError


def cmd_review(args: argparse.Namespace, out: Console) -> int:
    if args.trajectory or args.turn is not None:  # one job's turns, step by step
        from agent.review import show_trajectory

        if args.json:
            raise UserError("--json shows runs; --trajectory shows one job's turns as text")
        sys.stdout.write(show_trajectory(args.results, task=args.task, turn=args.turn))
        return 0
    results = _results(args.results, args.all)
    if args.json:
        from agent.review import review_json

        print(json.dumps(review_json(results, task=args.task, sort=args.sort), indent=2))
    else:
        from agent.review import render_review

        render_review(out, results, task=args.task, sort=args.sort, diff=args.diff, findings=args.findings)
    return 0


def _results(path: str, pooled: bool):
    """One run's results; with --all, a folder of several runs pooled into one view, and a line that says so."""
    from agent.review import load_results, several_runs

    results = load_results(path, pooled=pooled)
    runs = several_runs(Path(path)) if pooled else []
    if runs:
        print(f"note: {len(runs)} runs pooled into one view (--all): {', '.join(r.name for r in runs)}",
              file=sys.stderr)
    return results


def cmd_runs(args: argparse.Namespace, out: Console) -> int:
    from agent.review import runs_text

    sys.stdout.write(runs_text(args.dir, as_json=args.json))
    return 0


def cmd_report(args: argparse.Namespace, out: Console) -> int:
    from agent.review import write_html

    results = _results(args.results, args.all)
    path = write_html(results, Path(args.html))
    out.print(f"wrote {path} ({len(results.runs)} runs)", highlight=False)
    return 0


def cmd_compare(args: argparse.Namespace, out: Console) -> int:
    from agent.review import load_results

    a, b = load_results(args.run_a), load_results(args.run_b)
    if args.json:
        from agent.review import compare_json

        print(json.dumps(compare_json(a, b), indent=2))
    else:
        from agent.review import render_compare

        render_compare(out, a, b)
    return 0


def add(sub: argparse._SubParsersAction) -> None:
    rv = sub.add_parser("review", help="terminal view of a run or batch: verdicts, speedups, diffs, checks, cost")
    rv.add_argument("results", metavar="RESULTS_DIR", help="results/<run-id> (or one job folder inside it)")
    rv.add_argument("--task", default=None, help="show this task's runs (or one job key) in detail")
    rv.add_argument("--sort", choices=("job", "speedup", "cost", "verdict"), default="job",
                    help="order of the run list: job key (default), best speedup, lowest cost, or outcome")
    rv.add_argument("--all", action="store_true",
                    help="RESULTS_DIR holds several runs (results/ itself): pool them into one view (else refused, "
                         "naming them)")
    rv.add_argument("--json", action="store_true",
                    help="print the runs (records, figures, diffs; with --task each run's report) as JSON instead")
    rv.add_argument("--trajectory", action="store_true",
                    help="step through one job's turns: what the agent said, its tool calls and their outputs, each "
                         "grading (a run of several jobs: pick one with --task KEY)")
    rv.add_argument("--turn", type=at_least(1), default=None, metavar="N",
                    help="with --trajectory: only turn N, its outputs whole")
    rv.add_argument("--diff", action="store_true",
                    help="print each run's whole diff after its detail (by default: a summary, as git diff --stat)")
    rv.add_argument("--findings", action="store_true",
                    help="print the agent's whole final summary (the rules policy's decisions and lint findings)")
    rv.set_defaults(func=cmd_review)
    rn = sub.add_parser("runs", help="list the runs in a results folder: date, tasks, contestants, headline")
    rn.add_argument("dir", nargs="?", default="results", metavar="DIR",
                    help="a results folder (default: results), or one run's folder")
    rn.add_argument("--json", action="store_true", help="print the runs as a JSON list instead")
    rn.set_defaults(func=cmd_runs)
    rp = sub.add_parser("report", help="one self-contained HTML report of a run or batch")
    rp.add_argument("results", metavar="RESULTS_DIR", help="results/<run-id> (or one job folder inside it)")
    rp.add_argument("--html", required=True, metavar="OUT.html", help="the HTML file to write")
    rp.add_argument("--all", action="store_true",
                    help="RESULTS_DIR holds several runs (results/ itself): pool them into one report (else refused)")
    rp.set_defaults(func=cmd_report)
    cp = sub.add_parser("compare", help="what changed between two batch runs, task by task")
    cp.add_argument("run_a", metavar="RUN_A", help="results/<run-id> of the earlier run")
    cp.add_argument("run_b", metavar="RUN_B", help="results/<run-id> of the later run")
    cp.add_argument("--json", action="store_true",
                    help="print each model and (task, model) before and after, and the change, as JSON instead")
    cp.set_defaults(func=cmd_compare)
