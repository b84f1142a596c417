"""The `perfagent` command: parse arguments, call the modules, turn known errors into one line."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from agent.models.base import ModelError
from agent.task import Task, TaskError, load_task_set
from agent.workspace import PatchError, WorkspaceError

EXIT_BAD_INPUT = 2


class UserError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


def cmd_tasks(args: argparse.Namespace, out: Console) -> int:
    try:
        entries = load_task_set(args.path)
    except TaskError as e:
        raise UserError(str(e)) from None
    table = Table(title=f"tasks in {args.path}")
    for col in ("id", "title", "repo", "checks", "status"):
        table.add_column(col, overflow="fold")
    bad = []
    for entry in entries:
        if isinstance(entry, Task):
            s = entry.spec
            checks = "correctness" + (" + poison" if s.correctness.poison else "") + (f" + perf:{s.perf.metric}" if s.perf else "")
            table.add_row(s.id, s.title, _short(entry.repo), checks, "[green]ok[/]")
        else:
            bad.append(entry)
            table.add_row("-", "", "", "", "[red]invalid[/]")
    out.print(table)
    if not entries:
        raise UserError(f"{args.path}: no task files found")
    for e in bad:
        print(f"error: {e}", file=sys.stderr)
    return EXIT_BAD_INPUT if bad else 0
    return 0


def _short(path: str) -> str:
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


def _load_one_task(path: str) -> Task:
    from agent.task import load_task

    return load_task(path)


def _prices(args: argparse.Namespace):
    from agent.models.pricing import load_prices

    return load_prices(Path(args.prices) if args.prices else None)


def cmd_run(args: argparse.Namespace, out: Console) -> int:
    import json

    from agent.loop import Limits
    from agent.models import make_model
    from agent.progress import RunProgress
    from agent.runner import new_run_id, run_task

    task = _load_one_task(args.task)
    model = make_model(args.model, base_url=args.base_url, stream=args.stream, task=task)
    limits = Limits.of(task, max_turns=args.max_turns, max_cost_usd=args.max_cost, timeout_s=args.timeout)
    run_id = args.run_id or new_run_id()
    kwargs = dict(out_dir=Path(args.out), run_id=run_id, job=args.job, prices=_prices(args), limits=limits,
                  keep_workspace=args.keep_workspace)
    err = Console(stderr=True)
    if args.quiet or args.json:
        result = run_task(task, model, **kwargs)
    else:
        with RunProgress(err, f"{task.id} · {model.name}") as progress:
            result = run_task(task, model, on_event=progress, **kwargs)
    report = result.report
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    elif not args.quiet:
        _print_run_summary(out, result)
    for w in result.outcome.warnings:
        err.print(f"[yellow]warning:[/] {w}", highlight=False)
    return 1 if report["is_error"] else 0


def _print_run_summary(out: Console, result) -> None:
    r = result.report
    ev = r.get("evaluation") or {}
    perf = ev.get("perf") or {}
    cost = "unknown" if r["total_cost_usd"] is None else f"${r['total_cost_usd']:.4f}"
    out.print(f"[bold]{r['subtype']}[/] in {r['num_turns']} turns, {r['duration_ms'] / 1000:.1f}s, cost {cost}")
    out.print(f"verdict: [bold]{ev.get('verdict', '-')}[/]", highlight=False)
    if perf:
        out.print(f"perf {perf.get('metric')}: ratio {perf.get('ratio', 0):.3f} "
                  f"[{perf.get('ci_low', 0):.3f}, {perf.get('ci_high', 0):.3f}] p={perf.get('p_value', 1):.2g} "
                  f"-> {perf.get('verdict')}", highlight=False)
    out.print(f"patch:  {result.paths.patch}\nreport: {result.paths.report}", highlight=False)


def cmd_lint(args: argparse.Namespace, out: Console) -> int:
    import json

    from agent.analyzers import RULES, analyze_paths, findings_json, findings_table, fix_paths

    paths = [Path(p) for p in args.paths]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise UserError(f"no such file or directory: {', '.join(missing)}")
    unknown = sorted(set(args.rule or []) - set(RULES))
    if unknown:
        raise UserError(f"unknown rule {', '.join(unknown)}; rules: {', '.join(sorted(RULES))}")
    root = paths[0] if len(paths) == 1 and paths[0].is_dir() else Path.cwd()
    findings = analyze_paths(paths, root=root, rules=set(args.rule) if args.rule else None)
    if args.fix:
        fixed = fix_paths(findings, root)
        for path, n in sorted(fixed.items()):
            print(f"fixed {n} in {path}", file=sys.stderr)
    if args.json:
        print(json.dumps(findings_json(findings), indent=2))
    else:
        out.print(findings_table(findings, title=f"{len(findings)} finding(s) in {', '.join(args.paths)}"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="perfagent", description="Propose performance edits, prove them safe, measure them, report the cost.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="run the agent on one task")
    r.add_argument("task", help="a task file (TOML)")
    r.add_argument("--model", default="rules", help="rules | anthropic:<model> | openai:<model> | replay:<trajectory.jsonl>")
    r.add_argument("--base-url", default=None, help="API base URL (else ANTHROPIC_BASE_URL / OPENAI_BASE_URL)")
    r.add_argument("--stream", action="store_true", help="use the streaming API")
    r.add_argument("--max-turns", type=int, default=None)
    r.add_argument("--max-cost", type=float, default=None, help="USD")
    r.add_argument("--timeout", type=float, default=None, help="seconds")
    r.add_argument("--run-id", default=None)
    r.add_argument("--job", default=None, help="results sub-folder name (default: the task id)")
    r.add_argument("--out", default=".", help="folder that receives results/ and patches/")
    r.add_argument("--prices", default=None, help="JSON file of per-million-token prices overriding the built-in table")
    r.add_argument("--keep-workspace", action="store_true")
    r.add_argument("--quiet", action="store_true", help="no progress, no summary")
    r.add_argument("--json", action="store_true", help="print report.json to stdout")
    r.set_defaults(func=cmd_run)

    lint = sub.add_parser("lint", help="static performance findings on Python/PyTorch code")
    lint.add_argument("paths", nargs="+", metavar="PATH")
    lint.add_argument("--rule", action="append", help="only this rule id (repeatable)")
    lint.add_argument("--fix", action="store_true", help="apply the rewrites the analyzers consider safe")
    lint.add_argument("--json", action="store_true")
    lint.set_defaults(func=cmd_lint)

    t = sub.add_parser("tasks", help="validate and list tasks (a task file, a task-set file or a directory)")
    t.add_argument("path", nargs="?", default="tasks")
    t.set_defaults(func=cmd_tasks)
    # subcommands: one add_parser block each, in the order the README lists them
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Console(stderr=False)
    err = Console(stderr=True)
    try:
        return args.func(args, out)
    except (UserError, TaskError, ModelError, WorkspaceError, PatchError) as e:
        err.print(f"[red]error:[/] {e}", highlight=False)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        err.print("[red]interrupted[/]")
        return 130
    except Exception as e:  # noqa: BLE001 — a user sees one line; PERFAGENT_DEBUG=1 shows the traceback
        if os.environ.get("PERFAGENT_DEBUG"):
            raise
        err.print(f"[red]internal error:[/] {type(e).__name__}: {e} (PERFAGENT_DEBUG=1 shows the traceback)", highlight=False)
        return 1


if __name__ == "__main__":
    sys.exit(main())
