"""`perfagent lint PATH...`: static performance findings; with --fix --task, the rewrites the task's checks keep."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from agent.run import UserError


def cmd_lint(args: argparse.Namespace, out: Console) -> int:
    """Findings; with --fix, the zero-init rewrites the task's checks pass (--task), never protected paths."""
    from agent import lint
    from agent.analyzers import RULES, analyze_paths, findings_json, findings_table

    paths = [Path(p) for p in args.paths]
    why = lint.refusal(paths, args.rule or [], list(RULES), args.task, args.fix)
    if why:
        raise UserError(why)
    task = lint.lint_task(args.task, paths) if args.task else None
    root = lint.lint_root(task, paths)
    findings = analyze_paths(paths, root=root, rules=set(args.rule) if args.rule else None)
    if args.fix:
        err = Console(stderr=True, soft_wrap=True, emoji=False)
        fixes = lint.fix(task, findings, root, args.lock_dir, log=lambda m: err.print(f"[dim]{m}[/]", highlight=False))
        _say(fixes)
    if args.json:
        print(json.dumps(findings_json(findings), indent=2))
    else:
        out.print(findings_table(findings, title=f"{len(findings)} finding(s) in {', '.join(args.paths)}"))
    return 0


def _say(fixes) -> None:
    """What --fix did, on stderr: each decision, each file written, the count kept."""
    if fixes.plan is None:
        if fixes.skipped:
            note = f" ({fixes.protected} of them in protected paths, never rewritten)" if fixes.protected else ""
            print(f"skipped {fixes.skipped} zero-init rewrite(s){note}: nothing verifies them; "
                  "--fix --task TASK.toml keeps those the task's checks pass", file=sys.stderr)
        return
    plan = fixes.plan
    for d in plan.decisions:
        print(f"{'kept' if d.kept else 'rejected'} {d.finding.path}:{d.finding.line}: {d.reason}", file=sys.stderr)
    for rel, n in fixes.written.items():
        print(f"fixed {n} in {rel}", file=sys.stderr)
    kept = sum(d.kept for d in plan.decisions)
    print(f"{kept} of {len(plan.decisions)} zero-init rewrite(s) kept after {plan.evaluations} check(s)",
          file=sys.stderr)


def add(sub: argparse._SubParsersAction) -> None:
    lint = sub.add_parser("lint", help="static performance findings on Python/PyTorch code")
    lint.add_argument("paths", nargs="+", metavar="PATH", help="Python files or folders to analyse")
    lint.add_argument("--rule", action="append", help="only this rule id (repeatable)")
    lint.add_argument("--fix", action="store_true",
                      help="rewrite zeros -> empty only where verified: needs --task; never writes protected paths "
                           "(the task's, else tests/, test/, bench/, benchmarks/, test_*.py, *_test.py, conftest.py, "
                           "sitecustomize.py)")
    lint.add_argument("--task", default=None, metavar="TASK.toml",
                      help="with --fix: grade each rewrite with this task's checks (tests, poisoned memory, coverage) "
                           "and keep those that pass; PATHs must be inside the task's repo")
    lint.add_argument("--lock-dir", default=None,
                      help="device lock folder (default: $PERFAGENT_LOCK_DIR, else ~/.cache/perfagent/locks)")
    lint.add_argument("--json", action="store_true", help="print the findings as JSON instead of a table")
    lint.set_defaults(func=cmd_lint)
