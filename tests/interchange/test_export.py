"""`perfagent export`: a run's jobs as the predictions SWE-bench's and GSO's harnesses read, and as CSV.

The results folders are the real shapes (tests/helpers.py: report.json by the report writer, the ledger by
the batch's Ledger). The predictions are parsed here by the rules of SWE-bench's own reader
(`swebench.harness.utils.get_predictions_from_file`, then `run_evaluation` keys them by instance_id), which
GSO's `run_evaluation.py` / `opt_at_k.py` share: a .jsonl is `json.loads` of every line, a .json one JSON
list; each record a dict with `instance_id`, `model_name_or_path` and `model_patch`, all str.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from agent.interchange.export import CSV_COLUMNS, SCHEMA
from agent.results.report import AgentRun, read_report
from helpers import DIFF, SONNET, Job, make_batch, write_job

KEYS = ("instance_id", "model_name_or_path", "model_patch")


def swebench_read(path: Path) -> list[dict]:
    """SWE-bench's reader, its checks made strict: a .json file is one list, a .jsonl file one record a line."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        records = json.loads(text)
        assert isinstance(records, list)
    else:
        assert path.suffix == ".jsonl"
        records = [json.loads(line) for line in text.splitlines(keepends=True)]  # a blank line would raise
    for r in records:
        assert isinstance(r, dict)
        for k in KEYS:
            assert isinstance(r[k], str), (k, r)
        assert r["instance_id"] and r["model_name_or_path"]
    return records


def as_swebench_keeps(records: list[dict]) -> dict[str, dict]:
    """run_evaluation's `{pred[KEY_INSTANCE_ID]: pred for pred in predictions}`: one record per instance."""
    return {r["instance_id"]: r for r in records}


# -- predictions ---------------------------------------------------------------------------------------------
def test_every_job_is_one_prediction_with_its_patch_and_figures(tmp_path, perfagent):
    jobs = [Job("cuda-graph-buffers", SONNET, 0, speedup=1.8), Job("cuda-graph-buffers", SONNET, 1, verdict="fail"),
            Job("cuda-graph-buffers", "rules", 0, speedup=1.6), Job("cuda-graph-buffers", "rules", 1, speedup=None),
            Job("rope-cache", SONNET, 0, verdict="fail", speedup=None, rejected=True)]
    run_dir = make_batch(tmp_path, "batch-a", jobs=jobs, damage=False)
    out = tmp_path / "preds.jsonl"
    res = perfagent("export", str(run_dir), "--format", "predictions", "-o", str(out))
    assert res.returncode == 0, res.stderr
    assert f"wrote {out} (5 prediction(s))" in res.stdout
    assert "note: 1 instance id(s) occur more than once" in res.stderr  # K = 2: SWE-bench would keep one

    records = swebench_read(out)
    summary = {j["key"]: j for j in json.loads((run_dir / "summary.json").read_text())["jobs"]}
    assert len(records) == len(summary) == 5
    by_job = {r["perfagent"]["job"]: r for r in records}
    assert set(by_job) == set(summary)
    for key, r in by_job.items():
        job = summary[key]
        assert (r["instance_id"], r["model_name_or_path"]) == (job["task"], job["model"])
        p = r["perfagent"]
        assert p["schema"] == SCHEMA and p["run_id"] == "batch-a" and p["sample"] == job["sample"]
        assert (p["verdict"], p["perf_verdict"], p["speedup"], p["cost_usd"], p["num_turns"]) == (
            job["verdict"], job["perf_verdict"], job["speedup"], job["cost_usd"], job["num_turns"])
        assert p["speedup_interval"] == job["speedup_interval"] and p["reference_speedup"] == job["reference_speedup"]
        assert set(r) == {*KEYS, "perfagent"}  # perfagent's own fields under one key, nothing else beside
    emitted = by_job["cuda-graph-buffers/rules/s0"]
    assert emitted["model_patch"] == DIFF and emitted["perfagent"]["outcome"] == "pass"
    assert emitted["perfagent"]["correct"] is True and emitted["model_name_or_path"] == "rules"
    lo, hi = emitted["perfagent"]["speedup_interval"]
    assert lo < emitted["perfagent"]["speedup"] < hi
    rejected = by_job["rope-cache/anthropic-claude-sonnet-4-5/s0"]
    assert rejected["model_patch"] == "" and rejected["perfagent"]["outcome"] == "fail"  # nothing was emitted
    assert by_job["cuda-graph-buffers/rules/s1"]["perfagent"]["speedup"] is None


def test_one_file_per_sample_and_contestant_loses_nothing_to_swebenchs_reader(tmp_path, perfagent):
    run_dir = make_batch(tmp_path, "batch-k", damage=False,
                         jobs=[Job(t, m, k) for t in ("a", "b") for m in ("rules", SONNET) for k in (0, 1, 2)])
    for k in (0, 1, 2):
        for model in ("rules", SONNET):
            out = tmp_path / f"preds.{model.replace(':', '_')}.s{k}.jsonl"
            res = perfagent("export", str(run_dir), "--sample", str(k), "--model", model, "-o", str(out))
            assert res.returncode == 0, res.stderr
            assert "note:" not in res.stderr
            records = swebench_read(out)
            assert len(as_swebench_keeps(records)) == len(records) == 2  # instance_id unique per file
            assert {(r["model_name_or_path"], r["perfagent"]["sample"]) for r in records} == {(model, k)}
    # a .json path gets the JSON list form, the same records
    res = perfagent("export", str(run_dir), "--sample", "1", "--model", "rules", "-o", str(tmp_path / "p.json"))
    assert res.returncode == 0, res.stderr
    listed = swebench_read(tmp_path / "p.json")
    assert listed == swebench_read(tmp_path / "preds.rules.s1.jsonl")


def test_single_runs_job_folders_and_several_runs_concatenate_to_stdout(tmp_path, perfagent):
    write_job(tmp_path, "solo", Job("cuda-graph-buffers", SONNET, 0), key="cuda-graph-buffers")
    report = write_job(tmp_path, "ext", Job("rope-cache", "claude-code:claude-sonnet-4-6", 0), key="rope-cache")
    folder = tmp_path / "results" / "ext" / "rope-cache"
    report.model_copy(update={"agent": AgentRun(name="claude-code", model="claude-sonnet-4-6")}).write(
        folder / "report.json")
    assert read_report(folder / "report.json").agent is not None
    batch = make_batch(tmp_path, "batch-a", damage=False, jobs=[Job("t", "rules", 0), Job("t", "rules", 1)])

    res = perfagent("export", str(tmp_path / "results" / "solo"), str(folder), str(batch))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    records = [json.loads(line) for line in lines]
    assert [(r["perfagent"]["run_id"], r["instance_id"], r["model_name_or_path"]) for r in records] == [
        ("solo", "cuda-graph-buffers", "claude-sonnet-4-5"),  # a single run of our loop: its report's model
        ("ext", "rope-cache", "claude-code:claude-sonnet-4-6"),  # an external agent: its spec, from its report
        ("batch-a", "t", "rules"), ("batch-a", "t", "rules")]
    assert records[0]["model_patch"] == DIFF and records[0]["perfagent"]["job"] == "cuda-graph-buffers"
    assert res.stdout.endswith("}\n") and "\n\n" not in res.stdout


# -- csv ------------------------------------------------------------------------------------------------------
def test_csv_is_one_row_per_job_with_the_summarys_columns(tmp_path, perfagent):
    run_dir = make_batch(tmp_path, "batch-a")  # with a corrupt report (the ledger's figures) and a crashed job
    res = perfagent("export", str(run_dir), "--format", "csv")
    assert res.returncode == 0, res.stderr
    reader = csv.DictReader(io.StringIO(res.stdout))
    assert tuple(reader.fieldnames or ()) == CSV_COLUMNS
    rows = list(reader)
    summary = {j["key"]: j for j in json.loads((run_dir / "summary.json").read_text())["jobs"]}
    assert {r["job"] for r in rows} == set(summary)
    for r in rows:
        job = summary[r["job"]]
        assert (r["task"], r["contestant"], int(r["sample"])) == (job["task"], job["model"], job["sample"])
        assert r["speedup"] == ("" if job["speedup"] is None else repr(job["speedup"]))
        if job["speedup_interval"]:
            assert [float(r["speedup_low"]), float(r["speedup_high"])] == job["speedup_interval"]
        assert float(r["wall_s"]) == job["wall_s"] and int(r["turns"]) == job["num_turns"]
    outcomes = {r["job"]: r["outcome"] for r in rows}
    assert outcomes["cuda-graph-buffers/anthropic-claude-sonnet-4-5/s1"] == "fail"
    assert outcomes["metadata-alloc/rules/s0"] == "pass"
    out = tmp_path / "jobs.csv"
    assert perfagent("export", str(run_dir), "--format", "csv", "-o", str(out)).returncode == 0
    assert out.read_text() == res.stdout


# -- bad input -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, says", [
    (["{tmp}/nowhere"], "no such results folder"),
    (["{tmp}/results"], "not one run's folder"),  # the folder above the runs
    (["{tmp}/empty"], "no runs found"),
    (["{run}", "--format", "xml"], "unknown format 'xml'; formats: predictions, csv"),
    (["{run}", "--sample", "7"], "no job with sample 7; samples: 0, 1"),
    (["{run}", "--model", "gpt-9"], "no job of contestant 'gpt-9'; contestants: anthropic:claude-sonnet-4-5, rules"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, perfagent, args, says):
    run_dir = make_batch(tmp_path, "batch-a", damage=False)
    (tmp_path / "empty").mkdir()
    res = perfagent("export", *[a.format(tmp=tmp_path, run=run_dir) for a in args])
    assert res.returncode == 2
    assert res.stdout == "" and res.stderr.startswith("error: ") and res.stderr.count("\n") == 1
    assert says in res.stderr


def test_a_figure_taken_on_a_busy_machine_says_so_in_both_exports(tmp_path, perfagent):
    """The machine's conditions while the speed was sampled (agent.checks.conditions) travel with the figure: the
    CSV's `busy` column says why it compares with no other run, the predictions' `perfagent` object carries both."""
    from agent.checks.conditions import Conditions

    run_dir = make_batch(tmp_path, "batch-a", jobs=[Job("t1", "rules", 0), Job("t2", "rules", 0)], damage=False)
    busy = Conditions(cpus=2, busy_share=1.0, ours_share=0.3, others_share=0.7, runnable_per_core=2.5, cpu_mhz=2400)
    report = run_dir / "t1" / "rules" / "s0" / "report.json"
    data = json.loads(report.read_text())
    data["evaluation"]["perf"]["conditions"] = busy.model_dump()
    report.write_text(json.dumps(data))
    res = perfagent("export", str(run_dir), "--format", "csv")
    assert res.returncode == 0, res.stderr
    rows = {r["task"]: r for r in csv.DictReader(io.StringIO(res.stdout))}
    assert rows["t1"]["busy"] == "busy machine: other processes used 70% of its CPU, 2.5 other runnable tasks per core"
    assert (rows["t1"]["others_cpu_share"], rows["t1"]["runnable_per_core"], rows["t1"]["cpu_mhz"]) == ("0.7", "2.5",
                                                                                                        "2400.0")
    assert rows["t2"]["busy"] == rows["t2"]["others_cpu_share"] == ""  # no conditions recorded: nothing claimed
    res = perfagent("export", str(run_dir))
    figures = {p["instance_id"]: p["perfagent"] for p in map(json.loads, res.stdout.splitlines())}
    assert figures["t1"]["busy"] == rows["t1"]["busy"] and figures["t1"]["conditions"]["others_share"] == 0.7
    assert figures["t2"]["busy"] is None and figures["t2"]["conditions"] is None
