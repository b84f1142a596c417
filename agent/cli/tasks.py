"""`perfagent tasks [PATH]`: validate and list tasks; `perfagent tasks import`: other harnesses' records as tasks."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from agent.errors import EXIT_BAD_INPUT
from agent.run import UserError
from agent.task import Task, TaskError, TaskSpec, load_task_set

TASKS_IMPORT = "tasks-import"  # `perfagent tasks import ...` (main() routes it here; `tasks [PATH]` stays as it is)


def cmd_tasks(args: argparse.Namespace, out: Console) -> int:
    """Exit 0 when every task file is valid, 2 when one is not (one line each) or there are none."""
    from agent.env import checked_bases

    entries = checked_bases(load_task_set(args.path))
    bad = [str(e) for e in entries if not isinstance(e, Task)]
    if args.json and entries:
        print(json.dumps([_row(e) for e in entries], indent=2))
    elif not args.json:
        table = Table(title=f"tasks in {args.path}")
        for col in ("id", "title", "repo", "checks", "status"):
            table.add_column(col, overflow="fold")
        for e in entries:
            table.add_row(*((e.spec.id, e.spec.title, short(e.repo), " + ".join(_checks(e.spec)), "[green]ok[/]")
                            if isinstance(e, Task) else ("-", "", "", "", "[red]invalid[/]")))
        out.print(table)
    if not entries:
        raise UserError(f"{args.path}: no task files found")
    for line in bad:
        print(f"error: {line}", file=sys.stderr)
    return EXIT_BAD_INPUT if bad else 0


def _row(entry: Task | TaskError) -> dict:
    """`tasks --json`: one object per task file, valid or not."""
    if isinstance(entry, Task):
        s = entry.spec
        return {"id": s.id, "title": s.title, "repo": entry.repo, "file": str(entry.file), "checks": _checks(s),
                "status": "ok", "error": None}
    return {"id": None, "title": None, "repo": None, "file": None, "checks": [], "status": "invalid",
            "error": str(entry)}


def _checks(s: TaskSpec) -> list[str]:
    return ["correctness", *(["poison"] if s.correctness.poison else []),
            *([f"perf:{s.perf.metric}"] if s.perf else [])]


def short(path: str) -> str:
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


def cmd_tasks_import(args: argparse.Namespace, out: Console) -> int:
    """GSO or SWE-bench records -> task files, each validated: exit 0 when all were written, 1 when some
    record could not be (one line each on stderr; the others are written), 2 on bad input (nothing written)
    or when a record was refused as unsafe (its one line names why; nothing of it is written)."""
    from agent.interchange import IMPORT_FORMATS, import_records

    if args.format is None:
        raise UserError(f"give --format: {' or '.join(IMPORT_FORMATS)}")
    if args.format not in IMPORT_FORMATS:
        raise UserError(f"unknown --format {args.format!r}; formats: {', '.join(IMPORT_FORMATS)}")

    def wrote(task_file: Path, imported) -> None:
        left = f"; not mapped: {len(imported.unmapped)} (in its comments)" if imported.unmapped else ""
        out.print(f"wrote {short(str(task_file))}{left}", highlight=False)

    result = import_records(Path(args.records), args.format, Path(args.out), Path(args.repos) if args.repos else None,
                            on_task=wrote, force=args.force)
    for line in result.failed:
        print(f"error: {line}", file=sys.stderr)
    out.print(f"imported {len(result.written)} of {result.records} record(s) into {args.out}", highlight=False)
    return EXIT_BAD_INPUT if result.refused else 1 if result.failed else 0


def add(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("tasks", help="validate and list tasks (a task file, a task-set file or a directory)")
    t.add_argument("path", nargs="?", default="tasks",
                   help="a task file, a task-set file or a directory of tasks (default: tasks)")
    t.add_argument("--json", action="store_true",
                   help="print the tasks as a JSON list of {id, title, repo, file, checks, status, error} instead "
                        "of the table (exit code unchanged)")
    t.set_defaults(func=cmd_tasks)
    t.epilog = ("perfagent tasks import RECORDS.jsonl --format gso|swebench [--out DIR] [--repos DIR]: GSO or "
                "SWE-bench instance records as task files (perfagent tasks import --help); a directory named "
                "import is ./import")
    ti = sub.add_parser(TASKS_IMPORT, prog="perfagent tasks import",
                        description="Turn GSO or SWE-bench instance records (JSON lines, the published field names) "
                                    "into task files, each validated; what a task cannot say is listed in its "
                                    "comments. Exit 0: all written; 1: some records could not be (one line each, "
                                    "the others written); 2: bad input (nothing written) or a record refused as "
                                    "unsafe (nothing of it written).")
    ti.add_argument("records", metavar="RECORDS.jsonl", help="one instance record per line")
    ti.add_argument("--format", default=None, metavar="gso|swebench|iso-bench",
                    help="the records' format: gso or swebench (JSON lines), or iso-bench (an ISO-Bench task config, "
                         "YAML: one task per commit pair)")
    ti.add_argument("--out", default="tasks/imported",
                    help="folder for the task files and the files beside them (default: tasks/imported)")
    ti.add_argument("--repos", default=None, metavar="DIR",
                    help="local mirrors: a record's owner/name is DIR/<owner>__<name>, else DIR/<name> (default: "
                         "the repo's GitHub URL)")
    ti.add_argument("--force", action="store_true",
                    help="replace a task file, folder or reference diff of the same name (default: that record "
                         "fails, naming it)")
    ti.set_defaults(func=cmd_tasks_import)
