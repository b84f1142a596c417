"""`perfagent batch SET`: a task set x contestants x samples; the flags every run over a set takes (`check
--predictions` too), and its summary tables. agent.batch.request makes the batch: resume, baseline, subset."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from rich.console import Console

from agent.agents import AGENT_NAMES, OWN_AGENT, PREDICTION
from agent.batch import BASELINE, SetRequest, contestants, run_set, started
from agent.options import above_zero, add_run_flags, at_least, options_from_args


def cmd_batch(args: argparse.Namespace, out: Console) -> int:
    req = _request(args)
    run_id, plan = started(req)
    models = contestants(args.models, args.contestants or []) or plan.models or ["rules"]
    return _run_set(req, out, run_id, plan, source=args.set or plan.source, models=models,
                    samples=args.samples or plan.samples or 1)


def check_predictions(args: argparse.Namespace, out: Console) -> int:
    """`check SET --predictions FILE...`: every prediction graded as a batch job, beside the baseline."""
    from agent.interchange import read_sources

    given = read_sources(args.predictions, args.task)
    if given.no_reference:
        print(f"note: no reference patch, not graded: {', '.join(given.no_reference)}", file=sys.stderr)
    req = _request(args)
    run_id, plan = started(req)
    names = [f"{PREDICTION}:{p.model_name_or_path}" for p in given.predictions]
    return _run_set(req, out, run_id, plan, source=args.task, models=list(dict.fromkeys(names)), samples=1,
                    predictions=given.predictions, prediction_files=given.files)


def _request(args: argparse.Namespace) -> SetRequest:
    return SetRequest(options=options_from_args(args),
                      **{f.name: getattr(args, f.name) for f in fields(SetRequest) if f.name != "options"})


def _run_set(req, out: Console, run_id: str, plan, **how) -> int:
    """The batch, its summary tables; exit 1 if any job failed."""
    from agent.results import summary_tables

    result = run_set(req, run_id, plan, **how)
    for table in summary_tables(result.summary):
        out.print(table)
    out.print(f"summary: {result.summary_json} and {result.summary_md}", highlight=False)
    return 1 if result.failed else 0


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


def add_set_flags(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
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


def add(sub: argparse._SubParsersAction) -> None:
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
    add_set_flags(b)
    b.add_argument("--seed", type=int, default=None, help="the seed of --shuffle")
    add_run_flags(b, batch=True)
    b.set_defaults(func=cmd_batch)
