"""Results out, in the shapes the tools evaluators already use: `perfagent export`.

- predictions: one JSON object per job, the record SWE-bench's harness (`--predictions_path`) and GSO's
  (`run_evaluation.py`, `opt_at_k.py --prediction_paths`) read: `instance_id` (the task id),
  `model_name_or_path` (the contestant, as the batch names it) and `model_patch` (the emitted diff; "" when
  nothing passed, or the job left none), plus perfagent's own figures under the one key `perfagent`.
  Those readers keep one record per instance_id (a dict keyed by it), so K samples or several contestants
  go to one file each (`select`'s sample and model).
- csv: one row per job, the summary's columns, for pandas and spreadsheets. Its names come from ledgers made
  elsewhere, so every text cell goes through `csv_cell`: no formula a spreadsheet would run, no escape sequence.

`load_jobs` reads a run folder through the one loader (`agent.results.load`); everything after it is pure.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from agent.agents import PREDICTION, split_spec
from agent.checks.conditions import Conditions, busy_why
from agent.results.layout import EMITTED, RUN_PREDICTIONS, job_paths, locate, out_dir_of, split_key
from agent.results.load import load_run
from agent.interchange.predictions import Prediction
from agent.results.record import JobRecord
from agent.util.files import atomic_write
from agent.util.text import csv_cell
from agent.errors import BadInput

__all__ = ["CSV_COLUMNS", "FORMATS", "SCHEMA", "ExportError", "ExportedJob", "PerfagentFields",
           "contestant_name", "csv_row", "csv_text", "load_jobs", "prediction", "predictions_json", "predictions_jsonl",
           "repeated", "select", "write_run_predictions"]

SCHEMA = "perfagent.prediction/1"  # the `perfagent` object's shape; a change of a field's meaning bumps it
FORMATS = ("predictions", "csv")
CSV_COLUMNS = ("run_id", "job", "task", "contestant", "sample", "status", "outcome", "verdict", "perf_verdict",
               "speedup", "speedup_low", "speedup_high", "reference_speedup", "fraction_of_reference", "cost_usd",
               "turns", "wall_s", "busy", "others_cpu_share", "runnable_per_core", "cpu_mhz", "gpu_sm_mhz",
               "gpu_mem_mhz")  # busy: why the machine was, while the speed was sampled (agent.checks.conditions)


class ExportError(BadInput):
    """A folder that is no results folder, or a selection that leaves nothing: one line for the user."""


@dataclass(frozen=True)
class ExportedJob:
    """One job as exported: its run, its record (the summary's figures) and its emitted diff."""

    run_id: str
    record: JobRecord
    patch: str  # model_patch.diff's text; "" when the job emitted nothing


class PerfagentFields(BaseModel):
    """What perfagent measured of one job, beside the three keys every predictions reader knows."""

    model_config = ConfigDict(populate_by_name=True)

    schema_: str = Field(default=SCHEMA, alias="schema")
    run_id: str
    job: str  # the job key: "<task>/<model-slug>/s<k>" in a batch, the task id for a single run
    sample: int  # k of the K samples, from 0
    status: str  # done | failed | skipped
    outcome: str  # JobRecord.outcome: pass | fail | unverified | rejected | no change | <error subtype> | failed ...
    verdict: str | None  # the evaluation's verdict
    correct: bool  # JobRecord.correct: a pass from a run that ended in success
    perf_verdict: str | None  # faster | slower | no significant change | inconclusive | not confirmed
    speedup: float | None  # >1 is better, whichever way the metric points
    speedup_interval: tuple[float, float] | None  # its 95% interval, low end first
    reference_speedup: float | None  # the task's reference patch, measured in the same rounds
    fraction_of_reference: float | None  # (s - 1) / (s_ref - 1), only when both are significant
    cost_usd: float | None  # None: the model has no known price
    num_turns: int
    wall_s: float
    busy: str | None = None  # why the machine was busy while the speed was sampled: the figure compares with no other
    conditions: Conditions | None = None  # the machine while the speed was sampled (agent.checks.conditions)


# -- reading ----------------------------------------------------------------------------------------------
def load_jobs(path: Path | str) -> list[ExportedJob]:
    """Every job of a run folder `results/<run-id>` (a batch or a single run), or the one job of a job folder,
    ordered by task, contestant and sample."""
    path = Path(path)
    if not path.is_dir():
        raise ExportError(f"{path}: no such results folder")
    run_dir, only = locate(path)
    records = [r for r in load_run(run_dir).records if only is None or r.key == only]
    odd = sorted(r.key for r in records if "/" in r.key and split_key(r.key).slug is None)
    if odd:  # results/ itself, or a folder above it: its runs' jobs would pass for tasks
        raise ExportError(f"{path}: not one run's folder (it holds {odd[0]}/...): name results/<run-id>, "
                          "or several of them")
    if not records:
        raise ExportError(f"{path}: no runs found (expected <job>/report.json under a results/<run-id> folder)")
    records.sort(key=lambda r: (r.task, r.model, r.sample, r.key))
    return [ExportedJob(run_dir.name, r, _emitted(run_dir, r)) for r in records]


def write_run_predictions(run_dir: Path, records: Iterable[JobRecord]) -> Path:
    """A run's predictions.jsonl beside its summary: every job as `perfagent export RUN` writes it (ordered
    the same way), so a batch leaves the file SWE-bench's and GSO's harnesses read without a second command."""
    run_dir = Path(run_dir)
    jobs = [ExportedJob(run_dir.name, r, _emitted(run_dir, r))
            for r in sorted(records, key=lambda r: (r.task, r.model, r.sample, r.key))]
    path = run_dir / RUN_PREDICTIONS
    atomic_write(path, predictions_jsonl(prediction(j) for j in jobs))
    return path


def _emitted(run_dir: Path, record: JobRecord) -> str:
    """The job's model_patch.diff, whole: where the ledger says, else where a run writes it."""
    out_dir = out_dir_of(run_dir)
    candidates = [out_dir / record.patch] if record.patch else []
    candidates += [job_paths(out_dir, run_dir.name, record.key)[1] / EMITTED, run_dir / record.key / EMITTED]
    for p in candidates:
        if p.is_file():
            return p.read_bytes().decode("utf-8", errors="replace")
    return ""


# -- choosing ----------------------------------------------------------------------------------------------
def select(jobs: Sequence[ExportedJob], *, sample: int | None = None, model: str | None = None) -> list[ExportedJob]:
    """The jobs of one sample and/or one contestant; ExportError when that leaves none (naming what there is)."""
    out = [j for j in jobs if (sample is None or j.record.sample == sample)
           and (model is None or j.record.model == model)]
    if jobs and not out:
        if model is not None and all(j.record.model != model for j in jobs):
            there = ", ".join(sorted({j.record.model for j in jobs}))
            raise ExportError(f"no job of contestant {model!r}; contestants: {there}")
        there = ", ".join(str(s) for s in sorted({j.record.sample for j in jobs}))
        raise ExportError(f"no job with sample {sample}; samples: {there}")
    return out


def repeated(preds: Iterable[Prediction]) -> list[str]:
    """The instance ids that occur more than once: a SWE-bench or GSO reader keeps only one of each."""
    counts = Counter(p.instance_id for p in preds)
    return sorted(i for i, n in counts.items() if n > 1)


# -- predictions ------------------------------------------------------------------------------------------
def prediction(job: ExportedJob) -> Prediction:
    r = job.record
    return Prediction(
        instance_id=r.task, model_name_or_path=contestant_name(r.model), model_patch=job.patch,
        perfagent=PerfagentFields(
            run_id=job.run_id, job=r.key, sample=r.sample, status=r.status, outcome=r.outcome, verdict=r.verdict,
            correct=r.correct, perf_verdict=r.perf_verdict, speedup=r.speedup, speedup_interval=r.speedup_interval,
            reference_speedup=r.reference_speedup, fraction_of_reference=r.fraction_of_reference,
            cost_usd=r.cost_usd, num_turns=r.num_turns, wall_s=r.wall_s, busy=busy_why(r.conditions),
            conditions=r.conditions).model_dump(mode="json", by_alias=True))


def contestant_name(spec: str) -> str:
    """The contestant as a predictions file names it: a graded prediction's own name, so a file exported
    from `check --predictions` reads back as the same contestant; any other spec as the batch wrote it."""
    agent, model = split_spec(spec)
    return model if agent == PREDICTION else spec


def predictions_jsonl(preds: Iterable[Prediction]) -> str:
    """JSON lines: one object a line, no blank line (SWE-bench parses every line, a blank one included)."""
    return "".join(json.dumps(p.model_dump(mode="json"), ensure_ascii=False) + "\n" for p in preds)


def predictions_json(preds: Iterable[Prediction]) -> str:
    """One JSON list: the other form SWE-bench's `--predictions_path` reads (a path ending in .json)."""
    return json.dumps([p.model_dump(mode="json") for p in preds], indent=1, ensure_ascii=False) + "\n"


# -- csv ------------------------------------------------------------------------------------------------
def csv_row(job: ExportedJob) -> dict[str, object]:
    """One job as the summary's columns; a value that is not known is None (an empty cell)."""
    r = job.record
    low, high = r.speedup_interval or (None, None)
    c = r.conditions or Conditions()
    return {"run_id": job.run_id, "job": r.key, "task": r.task, "contestant": r.model, "sample": r.sample,
            "status": r.status, "outcome": r.outcome, "verdict": r.verdict, "perf_verdict": r.perf_verdict,
            "speedup": r.speedup, "speedup_low": low, "speedup_high": high, "reference_speedup": r.reference_speedup,
            "fraction_of_reference": r.fraction_of_reference, "cost_usd": r.cost_usd, "turns": r.num_turns,
            "wall_s": r.wall_s, "busy": busy_why(r.conditions), "others_cpu_share": c.others_share,
            "runnable_per_core": c.runnable_per_core, "cpu_mhz": c.cpu_mhz, "gpu_sm_mhz": c.gpu_sm_mhz,
            "gpu_mem_mhz": c.gpu_mem_mhz}


def csv_text(jobs: Iterable[ExportedJob]) -> str:
    """A header line and one row per job (RFC 4180 quoting, "\\n" line ends), each text cell neutralised
    (`csv_cell`): a contestant named "=HYPERLINK(...)" is text in a spreadsheet, not a live formula."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for job in jobs:
        w.writerow({k: csv_cell(v) for k, v in csv_row(job).items()})
    return buf.getvalue()
