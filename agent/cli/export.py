"""`perfagent export RUN...`: runs' jobs as SWE-bench / GSO predictions (JSON lines, or a JSON list to a .json
file) or as CSV (agent.interchange.export)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich.console import Console

from agent.options import at_least
from agent.run import UserError


def cmd_export(args: argparse.Namespace, out: Console) -> int:
    from agent.interchange import (EXPORT_FORMATS, csv_text, load_jobs, prediction, predictions_json,
                                   predictions_jsonl, repeated, select)
    from agent.util import atomic_write, strip_controls

    if args.format not in EXPORT_FORMATS:
        raise UserError(f"unknown format {args.format!r}; formats: {', '.join(EXPORT_FORMATS)}")
    jobs = select([j for run in args.runs for j in load_jobs(run)], sample=args.sample, model=args.model)
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
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def add(sub: argparse._SubParsersAction) -> None:
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
