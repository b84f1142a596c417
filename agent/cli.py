"""The `perfagent` command: parse arguments, call the modules, turn known errors into one line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from agent import __version__
from agent.agents import AGENT_NAMES, OWN_AGENT, join_spec, make_agent
from agent.options import RunOptions, above_zero, add_run_flags, at_least, empty_flags, options_from_args
from agent.run.entry import EXIT_BAD_INPUT, RunRequest, UserError, guarded, run_request
from agent.task import Task, TaskError, load_task, load_task_set

if TYPE_CHECKING:
    from agent.results.plan import Plan, Subset
    from agent.interchange.predictions import Prediction


def cmd_tasks(args: argparse.Namespace, out: Console) -> int:
    from agent.env.workspace import checked_bases

    try:
        entries = checked_bases(load_task_set(args.path))
    except TaskError as e:
        raise UserError(str(e)) from None
    if getattr(args, "json", False):
        return _tasks_json(args.path, entries)
    table = Table(title=f"tasks in {args.path}")
    for col in ("id", "title", "repo", "checks", "status"):
        table.add_column(col, overflow="fold")
    bad = []
    for entry in entries:
        if isinstance(entry, Task):
            s = entry.spec
            checks = ("correctness" + (" + poison" if s.correctness.poison else "")
                      + (f" + perf:{s.perf.metric}" if s.perf else ""))
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


def _tasks_json(path: str, entries: list[Task | TaskError]) -> int:
    """`tasks --json`: one object per task file, valid or not; the exit code is the table's."""
    import json

    if not entries:
        raise UserError(f"{path}: no task files found")
    rows = []
    for entry in entries:
        if isinstance(entry, Task):
            s = entry.spec
            checks = ["correctness", *(["poison"] if s.correctness.poison else []),
                      *([f"perf:{s.perf.metric}"] if s.perf else [])]
            rows.append({"id": s.id, "title": s.title, "repo": entry.repo, "file": str(entry.file),
                         "checks": checks, "status": "ok", "error": None})
        else:
            rows.append({"id": None, "title": None, "repo": None, "file": None, "checks": [], "status": "invalid",
                         "error": str(entry)})
    print(json.dumps(rows, indent=2))
    bad = [r["error"] for r in rows if r["status"] == "invalid"]
    for e in bad:
        print(f"error: {e}", file=sys.stderr)
    return EXIT_BAD_INPUT if bad else 0


def _short(path: str) -> str:
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


TASKS_IMPORT = "tasks-import"  # `perfagent tasks import ...` (main() routes it here; `tasks [PATH]` stays as it is)


def cmd_tasks_import(args: argparse.Namespace, out: Console) -> int:
    """GSO or SWE-bench records -> task files, each validated: exit 0 when all were written, 1 when some
    record could not be (one line each on stderr; the others are written), 2 on bad input (nothing written)
    or when a record was refused as unsafe (its one line names why; nothing of it is written)."""
    from agent.interchange.task_import import FORMATS, RecordsError, import_records

    if args.format is None:
        raise UserError(f"give --format: {' or '.join(FORMATS)}")
    if args.format not in FORMATS:
        raise UserError(f"unknown --format {args.format!r}; formats: {', '.join(FORMATS)}")

    def wrote(task_file: Path, imported) -> None:
        left = f"; not mapped: {len(imported.unmapped)} (in its comments)" if imported.unmapped else ""
        out.print(f"wrote {_short(str(task_file))}{left}", highlight=False)

    try:
        result = import_records(Path(args.records), args.format, Path(args.out),
                                Path(args.repos) if args.repos else None, on_task=wrote, force=args.force)
    except RecordsError as e:
        raise UserError(str(e)) from None
    for line in result.failed:
        print(f"error: {line}", file=sys.stderr)
    out.print(f"imported {len(result.written)} of {result.records} record(s) into {args.out}", highlight=False)
    return EXIT_BAD_INPUT if result.refused else 1 if result.failed else 0


def cmd_run(args: argparse.Namespace, out: Console) -> int:
    request = RunRequest(task_file=args.task, agent=args.agent, model=args.model or "", options=options_from_args(args),
                         run_id=args.run_id, job=args.job, out_dir=args.out)
    return run_request(request, out, display="json" if args.json else "quiet" if args.quiet else "summary")


def cmd_lint(args: argparse.Namespace, out: Console) -> int:
    """Findings; with --fix, the zero-init rewrites the task's checks pass (--task), never protected paths."""
    import json

    from agent.analyzers import RULES, analyze_paths, findings_json, findings_table

    paths = [Path(p) for p in args.paths]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise UserError(f"no such file or directory: {', '.join(missing)}")
    unknown = sorted(set(args.rule or []) - set(RULES))
    if unknown:
        raise UserError(f"unknown rule {', '.join(unknown)}; rules: {', '.join(sorted(RULES))}")
    if args.task and not args.fix:
        raise UserError("--task verifies --fix's rewrites; give --fix too")
    task = _lint_task(args.task, paths) if args.task else None
    if task is not None:
        root = Path(task.repo)
    else:
        root = paths[0] if len(paths) == 1 and paths[0].is_dir() else Path.cwd()
    findings = analyze_paths(paths, root=root, rules=set(args.rule) if args.rule else None)
    if args.fix:
        code = _lint_fix(task, findings, root, args.lock_dir)
        if code:
            return code
    if args.json:
        print(json.dumps(findings_json(findings), indent=2))
    else:
        out.print(findings_table(findings, title=f"{len(findings)} finding(s) in {', '.join(args.paths)}"))
    return 0


def _lint_task(task_file: str, paths: list[Path]) -> Task:
    """The task whose checks verify the rewrites; every PATH must be inside its (local) repo."""
    from agent.env.workspace import check_task_base

    task = load_task(task_file)
    check_task_base(task)
    if task.repo_is_url:
        raise UserError(f"{task_file}: lint --fix --task needs a task whose repo is a local folder, not {task.repo}")
    repo = Path(task.repo).resolve()
    outside = [str(p) for p in paths if not p.resolve().is_relative_to(repo)]
    if outside:
        raise UserError(f"not inside the task's repo {repo}: {', '.join(outside)}")
    return task


def _lint_fix(task: Task | None, findings: list, root: Path, lock_dir: str | None) -> int:
    """Without a task nothing verifies a zeros -> empty rewrite, so none is written; with one, each is
    graded by the task's checks and only those that pass are written. Returns 1 if the task cannot be checked."""
    import shutil
    import tempfile

    from agent.analyzers.findings import ZERO_INIT
    from agent.checks import CheckError
    from agent.checks.fixes import DEFAULT_PROTECTED, verify_rewrites
    from agent.util.globs import matches_any

    err = Console(stderr=True, soft_wrap=True)
    candidates = [f for f in findings if f.rule == ZERO_INIT and f.fixable]
    if task is None:
        protected = sum(matches_any(f.path, DEFAULT_PROTECTED) for f in candidates)
        if candidates:
            note = f" ({protected} of them in protected paths, never rewritten)" if protected else ""
            print(f"skipped {len(candidates)} zero-init rewrite(s){note}: nothing verifies them; "
                  "--fix --task TASK.toml keeps those the task's checks pass", file=sys.stderr)
        return 0
    work = Path(tempfile.mkdtemp(prefix=f"perfagent-lint-{task.id}-"))

    def log(m: str) -> None:
        err.print(f"[dim]{m}[/]", highlight=False)

    try:
        plan = verify_rewrites(task, candidates, work, lock_dir=Path(lock_dir) if lock_dir else None, log=log)
    except CheckError as e:
        err.print(f"[red]error:[/] {e}", highlight=False)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for d in plan.decisions:
        print(f"{'kept' if d.kept else 'rejected'} {d.finding.path}:{d.finding.line}: {d.reason}", file=sys.stderr)
    for rel, text in sorted(plan.files.items()):
        n = sum(d.kept and d.finding.path == rel for d in plan.decisions)
        if n:
            with open(root / rel, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
            print(f"fixed {n} in {rel}", file=sys.stderr)
    kept = sum(d.kept for d in plan.decisions)
    print(f"{kept} of {len(plan.decisions)} zero-init rewrite(s) kept after {plan.evaluations} check(s)",
          file=sys.stderr)
    return 0


EXIT_NOT_PASSED = 3  # check --strict: graded, and not a pass


def cmd_check(args: argparse.Namespace, out: Console) -> int:
    """Grade one patch (or re-grade recorded evidence): exit 0 whatever the verdict (with --strict, 3
    unless it passes), 2 on bad input, 1 if the task cannot be checked."""
    import json
    import shutil
    import tempfile

    from agent.env.workspace import PatchError, check_task_base

    patch_only = [f for f, given in (("--quick", args.quick), ("--no-perf", args.no_perf),
                                     ("--reference", args.reference), ("--json", args.json),
                                     ("--evidence", args.evidence), ("--strict", args.strict),
                                     ("--initcheck", args.initcheck)) if given]
    if args.predictions:
        if patch_only:
            raise UserError(f"{patch_only[0]} grades one patch: with --predictions every job gets the full evaluation")
        return _check_predictions(args, out)
    set_only = [f for f, given in (("--run-id", args.run_id), ("--resume", args.resume), ("--filter", args.filter),
                                   ("--tasks", args.tasks), ("--shuffle", args.shuffle), ("--slice", args.slice),
                                   ("--no-baseline", args.no_baseline)) if given]
    if set_only:
        raise UserError(f"{set_only[0]} goes with --predictions (a set of tasks); --patch grades one")
    task = load_task(args.task)
    if args.initcheck:
        correctness = task.spec.correctness.model_copy(update={"initcheck": True})
        task = task.model_copy(update={"spec": task.spec.model_copy(update={"correctness": correctness})})
    if args.regrade:  # nothing runs: the task's repository need not even be there
        return _regrade(task, Path(args.regrade), args.json, out, args.strict)
    check_task_base(task)
    opts = options_from_args(args)
    try:
        patch = Path(args.patch).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{args.patch}: cannot read patch: {getattr(e, 'strerror', None) or e}") from None
    from agent.checks.patchinfo import unreadable

    why = unreadable(patch)  # a diff cut short or a header alone is no patch, not one that changes nothing
    if why:
        raise UserError(f"{args.patch}: not a unified diff git can read: {why}")
    from agent.checks import Checker, evaluation_table, grade
    from agent.util.seal import write_sealed

    err = Console(stderr=True)
    log = (lambda m: None) if args.json == "-" else (lambda m: err.print(f"[dim]{m}[/]", highlight=False))
    work = Path(tempfile.mkdtemp(prefix=f"perfagent-check-{task.id}-"))
    try:
        with Checker(task, work, lock_dir=opts.lock_dir, log=log, seed=opts.seed) as checker:
            evidence = checker.collect(patch, quick=args.quick, perf=not args.no_perf, reference=args.reference)
    except PatchError as e:
        raise UserError(f"{args.patch}: does not apply to the task's base: {str(e).removeprefix('error: ')}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ev = grade(evidence, task.spec)
    if args.evidence:  # sealed: `--regrade` grades only evidence this machine's perfagent wrote
        write_sealed(Path(args.evidence), json.dumps(evidence.model_dump(mode="json"), indent=2) + "\n")
    text = json.dumps(ev.model_dump(mode="json"), indent=2)
    if args.json == "-":
        print(text)
    else:
        if args.json:
            Path(args.json).write_text(text + "\n")
        out.print(evaluation_table(ev))
    return _check_exit(ev.verdict, args.strict)


def _check_exit(verdict: str, strict: bool) -> int:
    from agent.checks.verdicts import Verdict

    return 1 if verdict == Verdict.ERROR else EXIT_NOT_PASSED if strict and verdict != Verdict.PASS else 0


def _regrade(task: Task, path: Path, json_to: str | None, out: Console, strict: bool) -> int:
    """Grade recorded evidence again under the task's rules as they are now; nothing is run. The exit
    code is the last grading's, as `check` gives it. Evidence whose seal does not verify under this
    machine's key is refused in one line (exit 2), never graded: a printed pass would travel without
    the caveat."""
    import json

    from agent.checks import evaluation_table, grade
    from agent.checks.evidence import EvidenceError, load_recorded
    from agent.util.seal import SealError, load_key

    try:
        recorded = load_recorded(path, load_key())
    except (EvidenceError, SealError) as e:
        raise UserError(str(e)) from None
    if not recorded:
        raise UserError(f"{path}: no gradings recorded")
    others = sorted({r.evidence.task_id for r in recorded} - {task.id, ""})
    if others:  # another task's evidence graded under this task's rules would print its verdict under this name
        raise UserError(f"{path}: evidence of task {others[0]!r}, not {task.id!r}: regrade it with that task's file")
    evs = [grade(r.evidence, task.spec) for r in recorded]
    if json_to:
        text = json.dumps([ev.model_dump(mode="json") for ev in evs], indent=2)
        if json_to == "-":
            print(text)
            return _check_exit(evs[-1].verdict, strict)
        Path(json_to).write_text(text + "\n")
    for n, (r, ev) in enumerate(zip(recorded, evs), 1):
        was = (r.evaluation or {}).get("verdict")
        change = "unchanged" if was == ev.verdict else f"was {was}" if was else "not graded before"
        out.print(f"grading {n} of {len(evs)}: {ev.verdict} ({change})", highlight=False)
    out.print(evaluation_table(evs[-1]))
    return _check_exit(evs[-1].verdict, strict)


def cmd_batch(args: argparse.Namespace, out: Console) -> int:
    from agent.agents import PREDICTION, split_spec
    from agent.run.model_spec import check_spec

    run_id, plan = _batch_run(args)
    given = [m.strip() for m in args.models.split(",") if m.strip()] if args.models is not None else []
    if args.models is not None and not given:
        raise UserError(f"--models {args.models!r} names no model: give comma-separated specs, or leave it out")
    given += [_contestant_spec(agent, model) for agent, model in args.contestants or []]
    for spec in given:  # every one, before anything is planned: a typo in the last is found now
        agent, model = split_spec(spec)
        if agent == PREDICTION:
            raise UserError(f"{spec}: predictions are graded with perfagent check SET --predictions FILE")
        if agent == OWN_AGENT:
            check_spec(model)  # an external agent's name is known (split_spec) and takes any model
    models = given or plan.models or ["rules"]
    return _run_set(args, out, run_id, plan, source=args.set or plan.source, models=models,
                    samples=args.samples or plan.samples or 1)


def _batch_run(args: argparse.Namespace) -> tuple[str, "Plan"]:
    """(run id, its plan so far: empty unless --resume)."""
    from agent.results.layout import run_folder
    from agent.results.plan import Plan, read_plan
    from agent.run.names import check_run_id, new_run_id

    if args.resume and not args.run_id:
        raise UserError("--resume needs the --run-id of the batch to continue")
    run_id = check_run_id(args.run_id) if args.run_id is not None else new_run_id()
    return run_id, read_plan(run_folder(Path(args.out).resolve(), run_id)) if args.resume else Plan()


def _run_set(args: argparse.Namespace, out: Console, run_id: str, plan: "Plan", *, source: str | None,
             models: list[str], samples: int, predictions: "list[Prediction] | None" = None,
             prediction_files: list[str] | None = None) -> int:
    """A batch over the chosen tasks of a set (`batch`, `check --predictions`), with the free baseline
    beside the contestants unless --no-baseline; its summary tables; exit 1 if any job failed."""
    from agent.batch.driver import BatchConfig, BatchError, load_tasks, run_batch
    from agent.batch.subset import SubsetError, choose
    from agent.results.layout import graded_predictions, run_folder
    from agent.interchange.predictions import PredictionsError, read_predictions
    from agent.results.tables import summary_tables
    from agent.run.entry import require_sandbox

    if not source:
        raise UserError("name a task set: a task-set file or a directory of tasks")
    baseline = plan.baseline if args.resume else None if args.no_baseline else BASELINE
    models = list(dict.fromkeys([*models, *([baseline] if baseline and not args.resume else [])]))
    run_dir = run_folder(Path(args.out).resolve(), run_id)
    if predictions is None and plan.predictions:  # a resumed `check --predictions`: the patches it read then
        try:
            predictions = read_predictions([graded_predictions(run_dir)])
        except PredictionsError as e:
            raise UserError(str(e)) from None
    opts = options_from_args(args)
    if opts == RunOptions():  # no run flag given: a resumed batch keeps its own
        opts = plan.options
    require_sandbox(models, opts.allow_unsandboxed)
    try:
        every = load_tasks(source)
        subset = _subset(args, plan)
        tasks, subset = choose(every, subset) if subset is not None else (every, None)
        cfg = BatchConfig(run_id=run_id, out_dir=Path(args.out), workers=args.workers,
                          executor=args.executor, gpus=[g.strip() for g in args.gpus.split(",") if g.strip()]
                          if args.gpus else None,
                          resume=args.resume, job_timeout_s=args.job_timeout, quiet=args.quiet,
                          source=str(Path(source).resolve()), options=opts, subset=subset, baseline=baseline,
                          predictions=predictions or [], prediction_files=prediction_files or plan.predictions,
                          left_out=frozenset(t.id for t in every) - {t.id for t in tasks})
        result = run_batch(tasks, models, samples, cfg)
    except (BatchError, SubsetError) as e:
        raise UserError(str(e)) from None
    for table in summary_tables(result.summary):
        out.print(table)
    out.print(f"summary: {result.summary_json} and {result.summary_md}", highlight=False)
    return 1 if result.failed else 0


BASELINE = "rules"  # the free contestant a batch adds beside the others: what a $0 search finds


def _subset(args: argparse.Namespace, plan: "Plan") -> "Subset | None":
    """The subset the flags ask for; a resumed batch keeps the one it chose."""
    from agent.results.plan import Subset

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks is not None else None
    asked = Subset(filter=args.filter, tasks=tasks, shuffle=args.shuffle, seed=args.seed, slice=args.slice)
    if args.resume:
        if asked != Subset(seed=args.seed):
            raise UserError("--resume runs the tasks the batch chose when it started: drop --filter, --tasks, "
                            "--shuffle and --slice")
        return plan.subset
    return asked if asked != Subset(seed=args.seed) else None


def _iso_runs(folders: list[Path], task_set: str) -> "list[Prediction]":
    """An ISO-Bench run folder given to --predictions: each item folder's patch, agent and model, and its claims,
    named for the set's tasks (a shipped task answers for the ISO-Bench instance it covers)."""
    from agent.interchange.iso_bench import read_run_folder

    if not folders:
        return []
    try:
        ids: set[str] | None = {t.id for t in load_task_set(task_set) if isinstance(t, Task)}
    except (TaskError, OSError):
        ids = None  # the set's own error is said where the batch loads it
    return [p for folder in folders for p in read_run_folder(folder, ids)]


def _check_predictions(args: argparse.Namespace, out: Console) -> int:
    """`check SET --predictions FILE...`: every prediction graded as a batch job, beside the baseline."""
    from agent.agents import PREDICTION
    from agent.interchange.predictions import GOLD, PredictionsError, gold_predictions, read_predictions

    files = [str(Path(f).resolve()) for f in args.predictions if f != GOLD]
    try:
        predictions = read_predictions([f for f in files if not Path(f).is_dir()])
        predictions += _iso_runs([Path(f) for f in files if Path(f).is_dir()], args.task)
        if GOLD in args.predictions:  # every task's reference patch, as SWE-bench's `--predictions_path gold`
            gold, missing = gold_predictions(args.task)
            predictions, files = predictions + gold, files + [GOLD]
            if missing:
                print(f"note: no reference patch, not graded: {', '.join(missing)}", file=sys.stderr)
    except PredictionsError as e:
        raise UserError(str(e)) from None
    run_id, plan = _batch_run(args)
    names = [f"{PREDICTION}:{p.model_name_or_path}" for p in predictions]
    return _run_set(args, out, run_id, plan, source=args.task, models=list(dict.fromkeys(names)), samples=1,
                    predictions=predictions, prediction_files=files)


def cmd_review(args: argparse.Namespace, out: Console) -> int:
    from agent.review.load import ReviewError
    from agent.review.terminal import render_review

    if args.trajectory or args.turn is not None:  # one job's turns, step by step
        from agent.review.trajectory import TrajectoryError, show_trajectory

        if args.json:
            raise UserError("--json shows runs; --trajectory shows one job's turns as text")
        try:
            sys.stdout.write(show_trajectory(args.results, task=args.task, turn=args.turn))
        except TrajectoryError as e:
            raise UserError(str(e)) from None
        return 0
    try:
        results = _results(args.results, args.all)
        if getattr(args, "json", False):
            import json

            from agent.review.dump import review_json

            print(json.dumps(review_json(results, task=args.task, sort=args.sort), indent=2))
        else:
            render_review(out, results, task=args.task, sort=args.sort, diff=args.diff, findings=args.findings)
    except ReviewError as e:
        raise UserError(str(e)) from None
    return 0


def _results(path: str, pooled: bool):
    """One run's results; with --all, a folder of several runs pooled into one view, and a line that says so."""
    from agent.review.load import load_results, several_runs

    results = load_results(path, pooled=pooled)
    runs = several_runs(Path(path)) if pooled else []
    if runs:
        print(f"note: {len(runs)} runs pooled into one view (--all): {', '.join(r.name for r in runs)}",
              file=sys.stderr)
    return results


def cmd_runs(args: argparse.Namespace, out: Console) -> int:
    from agent.review.runs import RunsError, runs_text

    try:
        sys.stdout.write(runs_text(args.dir, as_json=args.json))
    except RunsError as e:
        raise UserError(str(e)) from None
    return 0


def cmd_report(args: argparse.Namespace, out: Console) -> int:
    from agent.review.html import write_html
    from agent.review.load import ReviewError

    try:
        results = _results(args.results, args.all)
    except ReviewError as e:
        raise UserError(str(e)) from None
    path = write_html(results, Path(args.html))
    out.print(f"wrote {path} ({len(results.runs)} runs)", highlight=False)
    return 0


def cmd_compare(args: argparse.Namespace, out: Console) -> int:
    from agent.review.compare import render_compare
    from agent.review.load import ReviewError, load_results

    try:
        a, b = load_results(args.run_a), load_results(args.run_b)
    except ReviewError as e:
        raise UserError(str(e)) from None
    if getattr(args, "json", False):
        import json

        from agent.review.dump import compare_json

        print(json.dumps(compare_json(a, b), indent=2))
    else:
        render_compare(out, a, b)
    return 0


def cmd_export(args: argparse.Namespace, out: Console) -> int:
    """Runs' jobs as SWE-bench / GSO predictions (JSON lines, or a JSON list to a .json file) or as CSV."""
    from agent.interchange.export import (FORMATS, ExportError, csv_text, load_jobs, prediction, predictions_json,
                                      predictions_jsonl, repeated, select)
    from agent.util.files import atomic_write
    from agent.util.text import strip_controls

    if args.format not in FORMATS:
        raise UserError(f"unknown format {args.format!r}; formats: {', '.join(FORMATS)}")
    try:
        jobs = select([j for run in args.runs for j in load_jobs(run)], sample=args.sample, model=args.model)
    except ExportError as e:
        raise UserError(str(e)) from None
    if args.format == "csv":
        text, what = csv_text(jobs), f"{len(jobs)} row(s)"
    else:
        preds = [prediction(j) for j in jobs]
        as_list = bool(args.output) and args.output.endswith(".json")
        text = predictions_json(preds) if as_list else predictions_jsonl(preds)
        what = f"{len(preds)} prediction(s)"
        twice = repeated(preds)
        if twice:
            print(f"note: {len(twice)} instance id(s) occur more than once ({strip_controls(twice[0])}, ...): "
                  "SWE-bench and GSO keep one record per instance; --sample N (and --model M) write one file each",
                  file=sys.stderr)
    if args.output:
        try:
            atomic_write(Path(args.output), text)
        except OSError as e:
            raise UserError(f"{args.output}: cannot write: {e.strerror or e}") from None
        out.print(f"wrote {args.output} ({what})", highlight=False, soft_wrap=True)
        return 0
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader has what it wanted; nothing more to say at exit
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


class _Contestant(argparse.Action):
    """`--agent A --model M` pairs, in order: a --model completes the --agent before it, or stands alone
    as a model of our loop."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, value: object,
                 option: str | None = None) -> None:
        if not str(value).strip():  # an unset shell variable: never the default model
            raise argparse.ArgumentError(self, "empty value: give a model, or leave it out for the default")
        pairs = list(getattr(namespace, self.dest) or [])
        if option == "--agent":
            pairs.append([str(value), ""])
        elif pairs and not pairs[-1][1]:
            pairs[-1][1] = str(value)
        else:
            pairs.append([OWN_AGENT, str(value)])
        setattr(namespace, self.dest, pairs)


def _contestant_spec(agent: str, model: str) -> str:
    """One batch spec for `--agent A [--model M]`: an agent with no model gets its default one."""
    if agent == OWN_AGENT:
        return model or "rules"
    return join_spec(agent, model or make_agent(agent).model)


def _add_set_flags(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """What a run over a task set takes: workers, run id and resume, the baseline, which tasks."""
    p.add_argument("--workers", type=at_least(1), default=2, help="jobs at once")
    p.add_argument("--gpus", default=None, help="local executor: devices to spread jobs over, e.g. 0,1")
    p.add_argument("--executor", choices=["local", "ray"], default="local", help="ray: RAY_ADDRESS or a local cluster")
    p.add_argument("--run-id", default=None,
                   help="results/<run-id>/ folder name (default: a new timestamped id); "
                        "with --resume: the run to continue")
    p.add_argument("--resume", action="store_true", help="run only the jobs with no done line in batch.jsonl")
    p.add_argument("--out", default=".", help="folder that receives results/ and patches/")
    p.add_argument("--job-timeout", type=above_zero, default=None, help="hard limit per job, seconds")
    p.add_argument("--no-baseline", action="store_true",
                   help=f"do not add the free `{BASELINE}` policy as a contestant (the summary's margins are over it)")
    p.add_argument("--filter", metavar="REGEX", default=None, help="only the tasks whose id matches REGEX")
    p.add_argument("--tasks", metavar="ID,ID", default=None, help="only these tasks")
    p.add_argument("--shuffle", action="store_true", help="shuffle the tasks (with --seed) before --slice")
    p.add_argument("--slice", metavar="START:STOP", default=None, help="this slice of the tasks, e.g. 0:10")
    p.add_argument("--quiet", action="store_true", help="no live progress")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="perfagent",
                                description="Propose performance edits, prove them safe, measure them, "
                                            "report the cost.")
    p.add_argument("--version", action="version", version=f"perfagent {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

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
    c = sub.add_parser("check",
                       help="grade a patch: tests, poisoned memory, coverage of the change, protected paths, speedup")
    c.add_argument("task", help="a task file (TOML); with --predictions, a task-set file or a directory of tasks")
    what = c.add_mutually_exclusive_group(required=True)
    what.add_argument("--patch", help="a unified diff against the task's base")
    what.add_argument("--regrade", metavar="RUN", default=None,
                      help="grade recorded evidence again, running nothing: a run's job folder (its checks.json), "
                           "a checks.json, or a file written by --evidence; only when its MAC (FILE.mac) verifies "
                           "under this machine's key, else refused (exit 2)")
    what.add_argument("--predictions", action="append", metavar="FILE",
                      help="grade another harness's predictions (SWE-bench/GSO form: JSON lines or a list of "
                           "instance_id, model_name_or_path, model_patch; or sb-cli's {instance_id: {...}}; or an "
                           "ISO-Bench run folder, its agent's own claims and cost kept beside the evidence) "
                           "against the tasks of the set TASK names, as a batch; repeat for more samples; the "
                           "word gold: every task's own reference patch, as SWE-bench's --predictions_path gold")
    c.add_argument("--evidence", default=None, metavar="FILE",
                   help="also write what the checks found (the evidence the verdict was graded from) to FILE, "
                        "sealed with this machine's key in FILE.mac (--regrade grades nothing else)")
    c.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                   help="write the evaluation as JSON to FILE (no FILE: to stdout, instead of the table)")
    c.add_argument("--quick", action="store_true", help="fewer perf samples, as the agent's run_checks uses")
    c.add_argument("--no-perf", action="store_true", help="correctness only")
    c.add_argument("--initcheck", action="store_true",
                   help="also run the tests under compute-sanitizer --tool initcheck (uninitialised device reads)")
    c.add_argument("--reference", action="store_true", help="also measure the task's reference patch")
    c.add_argument("--seed", type=int, default=None, help="seed for the run order and the bootstrap")
    c.add_argument("--strict", action="store_true",
                   help=f"a gate for CI: exit {EXIT_NOT_PASSED} when the verdict is anything but pass (without it, "
                        "exit 0 whatever the change's verdict; always 1 when the task cannot be checked, 2 on bad "
                        "input)")
    c.add_argument("--lock-dir", default=None,
                   help="device lock folder (default: $PERFAGENT_LOCK_DIR, else ~/.cache/perfagent/locks)")
    preds = c.add_argument_group("with --predictions (TASK is then a task set), as `batch` takes them")
    _add_set_flags(preds)
    c.set_defaults(func=cmd_check)
    b = sub.add_parser("batch", help="run a task set x models x samples in parallel; resumable; summarised")
    b.add_argument("set", nargs="?", help="a task-set file or a directory of tasks (with --resume: the run's own)")
    b.add_argument("--models", default=None,
                   help="comma-separated specs: our loop's models, or <agent>:<model> (default: rules)")
    b.add_argument("--agent", action=_Contestant, dest="contestants", metavar="NAME", choices=AGENT_NAMES,
                   help="one more contestant (repeatable); the --model after it is its model")
    b.add_argument("--model", action=_Contestant, dest="contestants", metavar="MODEL",
                   help="the model of the --agent before it (or of our loop)")
    b.add_argument("--samples", type=at_least(1), default=None,
                   help="runs per (task, model): the K of Opt@K (default 1)")
    _add_set_flags(b)
    b.add_argument("--seed", type=int, default=None, help="the seed of --shuffle")
    add_run_flags(b, batch=True)
    b.set_defaults(func=cmd_batch)
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
    ex = sub.add_parser("export", help="runs' jobs as SWE-bench / GSO predictions (JSON lines) or CSV")
    ex.add_argument("runs", nargs="+", metavar="RUN",
                    help="results/<run-id> (a batch or a single run, or one job folder); several concatenate")
    ex.add_argument("--format", default="predictions", metavar="FORMAT",
                    help="predictions (default): {instance_id, model_name_or_path, model_patch, perfagent} per "
                         "job; csv: one row per job, the summary's columns")
    ex.add_argument("-o", "--output", default=None, metavar="FILE",
                    help="write to FILE (default: stdout); predictions to a FILE ending in .json: one JSON list")
    ex.add_argument("--sample", type=at_least(0), default=None, metavar="N",
                    help="only sample N (from 0): SWE-bench and GSO keep one record per instance, so with K "
                         "samples write one file per sample (GSO's opt_at_k.py reads K files)")
    ex.add_argument("--model", default=None, metavar="SPEC",
                    help="only this contestant, as the batch names it (rules, anthropic:..., claude-code:...)")
    ex.set_defaults(func=cmd_export)
    # subcommands: one add_parser block each, in the order the README lists them
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["tasks", "import"]:  # a word `tasks PATH` cannot take as its optional positional
        argv = [TASKS_IMPORT, *argv[2:]]
    parser = build_parser()
    args = parser.parse_args(argv)
    out = Console(stderr=False)
    return guarded(lambda: _call(parser, args, out))


def _call(parser: argparse.ArgumentParser, args: argparse.Namespace, out: Console) -> int:
    """The command, once no argument is empty: `--models "$M"` with M unset is a mistake, not the default."""
    empty = empty_flags(parser, args)
    if empty:
        raise UserError(f"{empty[0]} is empty (an unset shell variable?): give it a value, or leave it out")
    return args.func(args, out)


if __name__ == "__main__":
    sys.exit(main())
