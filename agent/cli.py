"""The `perfagent` command: parse arguments, call the modules, turn known errors into one line."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from agent.task import Task, TaskError, load_task_set

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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="perfagent", description="Propose performance edits, prove them safe, measure them, report the cost.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

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
    except (UserError, TaskError) as e:
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
