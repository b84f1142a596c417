"""The `perfagent` command: parse arguments, call the modules, turn known errors into one line."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent.models.base import ModelError
from agent.task import Task, TaskError, load_task_set
from agent.env.workspace import PatchError, WorkspaceError

EXIT_BAD_INPUT = 2
# Providers whose models are real, untrusted agents: their commands run only in a complete sandbox.
API_PROVIDERS = ("anthropic", "openai")


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


def _checked_names(run_id: str | None, job: str | None = None) -> None:
    """Run ids and job names are plain folder names (the runner's check), so no output lands outside --out."""
    from agent.run.names import BadName, check_job, check_run_id

    try:
        if run_id is not None:
            check_run_id(run_id)
        if job is not None:
            check_job(job)
    except BadName as e:
        raise UserError(str(e)) from None


def _require_sandbox(specs: list[str], allowed: bool) -> None:
    """Refuse to let a real API model's commands run where the sandbox is incomplete, unless allowed."""
    api = [s.strip() for s in specs if s.strip().partition(":")[0] in API_PROVIDERS]
    if not api or allowed:
        return
    from agent.env.sandbox import isolation

    iso = isolation()
    if not iso.complete:
        raise UserError(f"refusing to run {api[0]} unsandboxed ({iso.mode} here): not isolated: "
                        f"{'; '.join(iso.missing)}; install bubblewrap, or pass --allow-unsandboxed to run anyway")


@contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM raise Interrupted in the main thread, so the run writes its report, its best
    patch so far and cleans up. Only the first one raises: a second one must not cut that short."""
    from agent.run.loop import Interrupted

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if not fired:
            fired.append(signum)
            raise Interrupted(signal.Signals(signum).name)

    # An ignored signal (nohup, a background job) stays ignored.
    old = {s: h for s in (signal.SIGINT, signal.SIGTERM) if (h := signal.getsignal(s)) is not signal.SIG_IGN}
    for s in old:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


def cmd_run(args: argparse.Namespace, out: Console) -> int:
    from agent.run.loop import Limits, signal_exit_code
    from agent.models import make_model
    from agent.run.progress import RunProgress
    from agent.run.names import new_run_id
    from agent.run.runner import run_task

    _checked_names(args.run_id, args.job)  # before anything is read or written
    task = _load_one_task(args.task)
    if args.job is None:
        _checked_names(None, task.id)  # the default job name
    model = make_model(args.model, base_url=args.base_url, stream=args.stream, task=task)
    _require_sandbox([args.model], args.allow_unsandboxed)
    limits = Limits.of(task, max_turns=args.max_turns, max_cost_usd=args.max_cost, timeout_s=args.timeout)
    run_id = args.run_id or new_run_id()
    kwargs = dict(out_dir=Path(args.out), run_id=run_id, job=args.job, prices=_prices(args), limits=limits,
                  keep_workspace=args.keep_workspace)
    err = Console(stderr=True)
    with _signals_interrupt():
        if args.quiet or args.json:
            result = run_task(task, model, **kwargs)
        else:
            with RunProgress(err, f"{task.id} · {model.name}") as progress:
                result = run_task(task, model, on_event=progress, **kwargs)
    report = result.report
    if args.json:
        print(report.to_json(), end="")
    elif not args.quiet:
        _print_run_summary(out, result)
    for w in result.outcome.warnings:
        err.print(f"[yellow]warning:[/] {escape(w)}", highlight=False)
    if report.is_error:
        err.print(f"[red]error:[/] {report.subtype}: {escape(report.result)} (outputs in {result.paths.report.parent})",
                  highlight=False)
        return signal_exit_code(result.outcome.interrupted) if result.outcome.interrupted else 1
    return 0


def _print_run_summary(out: Console, result) -> None:
    r = result.report
    ev = r.evaluation
    perf = ev.perf if ev is not None else None
    cost = "unknown" if r.total_cost_usd is None else f"${r.total_cost_usd:.4f}"
    out.print(f"[bold]{r.subtype}[/] in {r.num_turns} turns, {r.duration_ms / 1000:.1f}s, cost {cost}")
    out.print(f"verdict: [bold]{ev.verdict if ev is not None else '-'}[/]", highlight=False)
    if perf is not None:
        out.print(f"perf {perf.metric}: ratio {perf.ratio or 0:.3f} "
                  f"[{perf.ci_low or 0:.3f}, {perf.ci_high or 0:.3f}] p={perf.p_value if perf.p_value is not None else 1:.2g} "
                  f"-> {perf.verdict}", highlight=False)
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


def cmd_check(args: argparse.Namespace, out: Console) -> int:
    """Grade one patch: exit 0 whatever the verdict, 2 on bad input, 1 if the task cannot be checked."""
    import json
    import shutil
    import tempfile

    from agent.checks import Checker, evaluation_table

    task = _load_one_task(args.task)
    try:
        patch = Path(args.patch).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{args.patch}: cannot read patch: {getattr(e, 'strerror', None) or e}") from None
    err = Console(stderr=True)
    log = (lambda m: None) if args.json == "-" else (lambda m: err.print(f"[dim]{m}[/]", highlight=False))
    work = Path(tempfile.mkdtemp(prefix=f"perfagent-check-{task.id}-"))
    try:
        with Checker(task, work, lock_dir=Path(args.lock_dir) if args.lock_dir else None, log=log, seed=args.seed) as checker:
            ev = checker.evaluate(patch, quick=args.quick, perf=not args.no_perf, reference=args.reference)
    except PatchError as e:
        raise UserError(f"{args.patch}: does not apply to the task's base: {str(e).removeprefix('error: ')}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(ev.model_dump(mode="json"), indent=2)
    if args.json == "-":
        print(text)
    else:
        if args.json:
            Path(args.json).write_text(text + "\n")
        out.print(evaluation_table(ev))
    return 1 if ev.verdict == "error" else 0


def cmd_batch(args: argparse.Namespace, out: Console) -> int:
    from agent.batch.driver import BatchConfig, BatchError, load_tasks, read_plan, run_batch, run_flags
    from agent.batch.summary import summary_tables
    from agent.run.names import new_run_id

    if args.resume and not args.run_id:
        raise UserError("--resume needs the --run-id of the batch to continue")
    _checked_names(args.run_id)
    run_id = args.run_id or new_run_id()
    plan = read_plan(Path(args.out).resolve() / "results" / run_id) if args.resume else {}
    source = args.set or plan.get("source")
    if not source:
        raise UserError("name a task set: a task-set file or a directory of tasks")
    models = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else plan.get("models", ["rules"])
    flags = run_flags(base_url=args.base_url, stream=args.stream, max_turns=args.max_turns, max_cost=args.max_cost,
                      timeout=args.timeout, prices=args.prices, allow_unsandboxed=args.allow_unsandboxed,
                      ) or tuple(plan.get("run_args", ()))
    _require_sandbox(models, "--allow-unsandboxed" in flags)
    cfg = BatchConfig(run_id=run_id, out_dir=Path(args.out), workers=args.workers, executor=args.executor,
                      gpus=[g.strip() for g in args.gpus.split(",") if g.strip()] if args.gpus else None,
                      resume=args.resume, job_timeout_s=args.job_timeout, quiet=args.quiet,
                      source=str(Path(source).resolve()), run_args=flags)
    try:
        result = run_batch(load_tasks(source), models, args.samples or plan.get("samples", 1), cfg)
    except BatchError as e:
        raise UserError(str(e)) from None
    for table in summary_tables(result.summary):
        out.print(table)
    out.print(f"summary: {result.summary_json} and {result.summary_md}", highlight=False)
    return 1 if result.failed else 0


def cmd_review(args: argparse.Namespace, out: Console) -> int:
    from agent.review.load import ReviewError, load_results, render_review

    try:
        render_review(out, load_results(args.results), task=args.task, sort=args.sort)
    except ReviewError as e:
        raise UserError(str(e)) from None
    return 0


def cmd_report(args: argparse.Namespace, out: Console) -> int:
    from agent.review.html import write_html
    from agent.review.load import ReviewError, load_results

    try:
        results = load_results(args.results)
    except ReviewError as e:
        raise UserError(str(e)) from None
    path = write_html(results, Path(args.html))
    out.print(f"wrote {path} ({len(results.runs)} runs)", highlight=False)
    return 0


def cmd_compare(args: argparse.Namespace, out: Console) -> int:
    from agent.review.load import ReviewError, load_results, render_compare

    try:
        render_compare(out, load_results(args.run_a), load_results(args.run_b))
    except ReviewError as e:
        raise UserError(str(e)) from None
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
    r.add_argument("--allow-unsandboxed", action="store_true",
                   help="let an API model run where the sandbox is incomplete (the report lists what is not isolated)")
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
    c = sub.add_parser("check", help="grade a patch: tests, poisoned memory, coverage of the change, protected paths, speedup")
    c.add_argument("task", help="a task file (TOML)")
    c.add_argument("--patch", required=True, help="a unified diff against the task's base")
    c.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                   help="write the evaluation as JSON to FILE (no FILE: to stdout, instead of the table)")
    c.add_argument("--quick", action="store_true", help="fewer perf samples, as the agent's run_checks uses")
    c.add_argument("--no-perf", action="store_true", help="correctness only")
    c.add_argument("--reference", action="store_true", help="also measure the task's reference patch")
    c.add_argument("--seed", type=int, default=None, help="seed for the run order and the bootstrap")
    c.add_argument("--lock-dir", default=None, help="device lock folder (default ~/.cache/perfagent/locks)")
    c.set_defaults(func=cmd_check)
    b = sub.add_parser("batch", help="run a task set x models x samples in parallel; resumable; summarised")
    b.add_argument("set", nargs="?", help="a task-set file or a directory of tasks (with --resume: the run's own)")
    b.add_argument("--models", default=None, help="comma-separated model specs (default: rules)")
    b.add_argument("--samples", type=int, default=None, help="runs per (task, model): the K of Opt@K (default 1)")
    b.add_argument("--workers", type=int, default=2, help="jobs at once")
    b.add_argument("--gpus", default=None, help="local executor: devices to spread jobs over, e.g. 0,1")
    b.add_argument("--executor", choices=["local", "ray"], default="local", help="ray: RAY_ADDRESS or a local cluster")
    b.add_argument("--run-id", default=None)
    b.add_argument("--resume", action="store_true", help="run only the jobs with no done line in batch.jsonl")
    b.add_argument("--out", default=".", help="folder that receives results/ and patches/")
    b.add_argument("--job-timeout", type=float, default=None, help="hard limit per job, seconds")
    for flag, kw in (("--base-url", {}), ("--max-turns", {"type": int}), ("--max-cost", {"type": float}),
                     ("--timeout", {"type": float}), ("--prices", {})):
        b.add_argument(flag, default=None, help="passed to every job's run", **kw)
    b.add_argument("--stream", action="store_true", help="passed to every job's run")
    b.add_argument("--allow-unsandboxed", action="store_true", help="passed to every job's run")
    b.add_argument("--quiet", action="store_true", help="no live progress")
    b.set_defaults(func=cmd_batch)
    rv = sub.add_parser("review", help="terminal view of a run or batch: verdicts, speedups, diffs, checks, cost")
    rv.add_argument("results", metavar="RESULTS_DIR", help="results/<run-id> (or one job folder inside it)")
    rv.add_argument("--task", default=None, help="show this task's runs (or one job key) in detail")
    rv.add_argument("--sort", choices=("job", "speedup", "cost", "verdict"), default="job")
    rv.set_defaults(func=cmd_review)
    rp = sub.add_parser("report", help="one self-contained HTML report of a run or batch")
    rp.add_argument("results", metavar="RESULTS_DIR")
    rp.add_argument("--html", required=True, metavar="OUT.html")
    rp.set_defaults(func=cmd_report)
    cp = sub.add_parser("compare", help="what changed between two batch runs, task by task")
    cp.add_argument("run_a", metavar="RUN_A", help="results/<run-id> of the earlier run")
    cp.add_argument("run_b", metavar="RUN_B")
    cp.set_defaults(func=cmd_compare)
    # subcommands: one add_parser block each, in the order the README lists them
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Console(stderr=False)
    err = Console(stderr=True)
    try:
        return args.func(args, out)
    except (UserError, TaskError, ModelError, WorkspaceError, PatchError) as e:
        err.print(f"[red]error:[/] {escape(str(e))}", highlight=False)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as e:  # an Interrupted (SIGTERM too) that struck outside a run's own handling
        err.print("[red]interrupted[/]")
        return getattr(e, "exit_code", 130)
    except Exception as e:  # noqa: BLE001 — a user sees one line; PERFAGENT_DEBUG=1 shows the traceback
        if os.environ.get("PERFAGENT_DEBUG"):
            raise
        err.print(f"[red]internal error:[/] {type(e).__name__}: {escape(str(e))} (PERFAGENT_DEBUG=1 shows the traceback)",
                  highlight=False)
        return 1


if __name__ == "__main__":
    sys.exit(main())
