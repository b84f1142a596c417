"""`perfagent check TASK --patch P`: grade one patch; `--regrade RUN`: grade recorded evidence again, running
nothing; `--predictions FILE`: another harness's patches graded as a batch (cli/batch.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from agent.cli.batch import add_set_flags, check_predictions
from agent.options import options_from_args
from agent.run import UserError
from agent.task import load_task

EXIT_NOT_PASSED = 3  # check --strict: graded, and not a pass
PATCH_ONLY = ("quick", "no_perf", "reference", "json", "evidence", "strict", "initcheck")
SET_ONLY = ("run_id", "resume", "filter", "tasks", "shuffle", "slice", "no_baseline")


def cmd_check(args: argparse.Namespace, out: Console) -> int:
    """Grade one patch (or re-grade recorded evidence): exit 0 whatever the verdict (with --strict, 3
    unless it passes), 2 on bad input, 1 if the task cannot be checked."""
    patch_only = [_flag(d) for d in PATCH_ONLY if getattr(args, d)]
    if args.predictions:
        if patch_only:
            raise UserError(f"{patch_only[0]} grades one patch: with --predictions every job gets the full evaluation")
        return check_predictions(args, out)
    set_only = [_flag(d) for d in SET_ONLY if getattr(args, d)]
    if set_only:
        raise UserError(f"{set_only[0]} goes with --predictions (a set of tasks); --patch grades one")
    task = load_task(args.task)
    from agent.checks import check_patch, evaluation_table, regrade, with_initcheck

    task = with_initcheck(task) if args.initcheck else task
    if args.regrade:  # nothing runs: the task's repository need not even be there
        return _regraded(regrade(task, Path(args.regrade)), args.json, out, args.strict)
    opts = options_from_args(args)
    err = Console(stderr=True, emoji=False)
    evidence, ev = check_patch(task, args.patch, lock_dir=opts.lock_dir, seed=opts.seed, quick=args.quick,
                               perf=not args.no_perf, reference=args.reference,
                               log=(lambda m: None) if args.json == "-" else
                               (lambda m: err.print(f"[dim]{m}[/]", highlight=False)))
    if args.evidence:  # sealed: `--regrade` grades only evidence this machine's perfagent wrote
        from agent.util import write_sealed

        write_sealed(Path(args.evidence), json.dumps(evidence.model_dump(mode="json"), indent=2) + "\n")
    text = json.dumps(ev.model_dump(mode="json"), indent=2)
    if args.json == "-":
        print(text)
    else:
        if args.json:
            Path(args.json).write_text(text + "\n")
        out.print(evaluation_table(ev))
    return _check_exit(ev.verdict, args.strict)


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _check_exit(verdict: str, strict: bool) -> int:
    from agent.checks import Verdict

    return 1 if verdict == Verdict.ERROR else EXIT_NOT_PASSED if strict and verdict != Verdict.PASS else 0


def _regraded(graded: list, json_to: str | None, out: Console, strict: bool) -> int:
    """Each regrading beside the verdict recorded then, and the last one's table; the exit code is the last
    grading's, as `check` gives it."""
    from agent.checks import change, evaluation_table

    evs = [ev for _, ev in graded]
    if json_to:
        text = json.dumps([ev.model_dump(mode="json") for ev in evs], indent=2)
        if json_to == "-":
            print(text)
            return _check_exit(evs[-1].verdict, strict)
        Path(json_to).write_text(text + "\n")
    for n, (r, ev) in enumerate(graded, 1):
        out.print(f"grading {n} of {len(evs)}: {ev.verdict} ({change(r, ev)})", highlight=False)
    out.print(evaluation_table(evs[-1]))
    return _check_exit(evs[-1].verdict, strict)


def add(sub: argparse._SubParsersAction) -> None:
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
    add_set_flags(preds)
    c.set_defaults(func=cmd_check)
