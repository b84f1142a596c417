"""Red team, what a person sees: a mistake is refused at once, and nothing that is no answer passes for one.

Each case plays a user's slip (or a harness's bad record) through the CLI, `perfagent` as a subprocess on the
tiny task of redteam.lab:

| input                                                                  | must hold                              |
|------------------------------------------------------------------------|----------------------------------------|
| 1. `run --model nope`, a missing replay or price file, an empty        | exit 2, one line, before any provider  |
|    `--model`, a `--base-url` without a scheme, the `--run-id` of a     |   SDK (or torch, ray, litellm, the     |
|    run still going                                                     |   checks) is imported; nothing written |
| 2. predictions whose model_patch is a diff cut short, a header alone,  | `rejected`, with git's reason          |
|    or prose ("hello world")                                            |                                        |
| 3. the same two diffs given to `check --patch`                         | exit 2, one line, git's reason         |
| 4. empty and null predictions, on a task whose base fails its tests    | `no-change` at once: no base check ran |
|                                                                        |   (it would have made them errors)     |
| 5. `batch --models ""` (an unset shell variable)                       | exit 2, one line; no batch is started  |
| 6. `check TASK --regrade` of another task's sealed evidence            | exit 2, one line naming both tasks     |
| 7. `review` / `report` of results/ holding several runs                | exit 2, one line listing them; --all   |
|                                                                        |   pools them and says so               |

Before: 2 and 4 (empty) were `no-change` (4 after the base check, so here an error), 5 started the default
batch, 6 printed the other task's verdict under this task's name, 7 pooled the runs into one "batch", and a
refusal of 1 imported both provider SDKs first (17 to 60 s on a loaded machine).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.env.sandbox import isolation
from agent.results.layout import claim_job
from helpers import Job, write_job
from redteam.lab import Lab, Proc, make_lab

# What no refusal may wait for: the provider SDKs, torch, ray, litellm; the checks (libcst, numpy) too.
HEAVY = ("anthropic", "openai", "torch", "ray", "litellm", "agent.checks")
BROKEN_BASE = {"tests/test_mod.py": "def test_work():\n    assert False, 'the base fails its own test'\n"}
CUT_SHORT = "diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1,6 +1,6 @@\n import time\n"
HEADER_ONLY = "diff --git a/pkg/mod.py b/pkg/mod.py\n"


def imported(proc: Proc) -> set[str]:
    """The modules a run under PYTHONPROFILEIMPORTTIME imported."""
    return {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}


def said(proc: Proc) -> list[str]:
    """stderr without the import-time lines."""
    return [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("import time:")]


def one_line(proc: Proc, *words: str) -> str:
    lines = said(proc)
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], lines[-20:])
    assert len(lines) == 1 and lines[0].startswith("error: "), lines[-20:]
    assert all(w in lines[0] for w in words), lines[0]
    assert "Traceback" not in proc.stderr
    return lines[0]


def light(proc: Proc, heavy: tuple[str, ...] = HEAVY) -> None:
    mods = imported(proc)
    assert mods, "PYTHONPROFILEIMPORTTIME gave no import lines"
    loaded = sorted(m for m in mods if any(m == h or m.startswith(h + ".") for h in heavy))
    assert not loaded, f"a refusal imported {loaded[:8]}"


def timed(lab: Lab, *args: str) -> Proc:
    return lab.perfagent(*args, env={"PYTHONPROFILEIMPORTTIME": "1"}, timeout=120)


@pytest.fixture
def lab(tmp_path: Path) -> Lab:
    return make_lab(tmp_path, perf=False)


@pytest.mark.parametrize("args, words", [
    (("--model", "nope"), ("unknown model spec 'nope'",)),
    (("--model", "replay:gone.jsonl"), ("trajectory not found", "gone.jsonl")),
    (("--prices", "gone.json"), ("--prices", "gone.json", "cannot read")),
    (("--model", ""), ("--model is empty",)),
    (("--agent", "codex", "--model", " "), ("--model is empty",)),
])
def test_a_run_mistake_is_one_line_before_any_heavy_import(lab, args, words):
    proc = timed(lab, "run", str(lab.task), "--out", str(lab.out), "--run-id", "r1", *args)
    one_line(proc, *words)
    light(proc)
    assert not any(lab.out.iterdir()), "nothing is written"


def test_a_base_url_without_a_scheme_is_refused_before_anything(lab):
    proc = timed(lab, "run", str(lab.task), "--base-url", "localhost:8000", "--out", str(lab.out))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "argument --base-url" in said(proc)[-1] and "http://localhost:8000" in said(proc)[-1], said(proc)
    light(proc)
    assert not any(lab.out.iterdir())


def test_the_run_id_of_a_live_run_is_refused_first(lab):
    with claim_job(lab.out / "results" / "r1" / lab.task_id):  # a run still going holds its job's folder
        proc = timed(lab, "run", str(lab.task), "--out", str(lab.out), "--run-id", "r1", "--model", "anthropic")
    one_line(proc, "being written by a live run", "--run-id")
    light(proc)


def predictions(lab: Lab, records: dict[str, str | None]) -> dict[str, dict]:
    """`check TASK --predictions` of one record per model name (no baseline): each job's evaluation, by name."""
    f = lab.root / "preds.jsonl"
    f.write_text("".join(json.dumps({"instance_id": lab.task_id, "model_name_or_path": name, "model_patch": patch})
                         + "\n" for name, patch in records.items()))
    proc = lab.perfagent("check", str(lab.task), "--predictions", str(f), "--no-baseline", "--out", str(lab.out),
                         "--run-id", "p", "--quiet")
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    reports = [json.loads(r.read_text()) for r in (lab.out / "results" / "p").rglob("report.json")]
    return {r["agent"]["model"]: r["evaluation"] for r in reports}


@pytest.mark.slow(seconds=40)
def test_text_that_is_no_diff_is_rejected_and_an_empty_prediction_waits_for_nothing(tmp_path):
    # The task's base fails its own test: a job that checked the base would end in an error, so a
    # verdict below proves no base check ran for it.
    lab = make_lab(tmp_path, perf=False, files=BROKEN_BASE)
    got = predictions(lab, {"cut-short": CUT_SHORT, "header-only": HEADER_ONLY, "prose": "hello world",
                            "empty": "", "null": None})
    assert set(got) == {"cut-short", "header-only", "prose", "empty", "null"}, got
    for name, why in (("cut-short", "corrupt patch at line"), ("header-only", "No valid patches in input"),
                      ("prose", "No valid patches in input")):
        assert got[name]["verdict"] == "rejected", (name, got[name])
        note = got[name]["note"]
        assert note.startswith("the patch is not a diff git can read: ") and why in note, got[name]
    for name in ("empty", "null"):
        assert got[name]["verdict"] == "no-change" and got[name]["note"] == "the prediction's patch is empty", got[name]


@pytest.mark.parametrize("patch, why", [(CUT_SHORT, "corrupt patch at line"), (HEADER_ONLY, "No valid patches")])
def test_check_refuses_a_patch_git_cannot_read_with_gits_reason(lab, patch, why):
    f = lab.root / "p.diff"
    f.write_text(patch)
    proc = timed(lab, "check", str(lab.task), "--patch", str(f))
    one_line(proc, "p.diff", why)
    light(proc, HEAVY[:-1])  # `check` reads the diff with the checks' own reader


def test_an_empty_models_list_starts_no_batch(lab):
    for models in ("", " , "):
        proc = timed(lab, "batch", str(lab.task), "--models", models, "--out", str(lab.out))
        one_line(proc, "--models")
        light(proc)
    assert not any(lab.out.iterdir()), "no batch was started"


@pytest.mark.slow(seconds=40)
@pytest.mark.skipif(isolation().mode != "bwrap", reason="bubblewrap is not usable on this machine")
def test_regrade_refuses_another_tasks_evidence(lab):
    other = lab.root / "other.toml"
    other.write_text(lab.task.read_text().replace(f'id = "{lab.task_id}"', 'id = "another-task"'))
    diff = lab.root / "change.diff"
    diff.write_text(lab.patch({"pkg/mod.py": lambda t: t.replace("time.sleep(0.02)", "time.sleep(0.01)")}))
    proc = lab.perfagent("check", str(other), "--patch", str(diff), "--evidence", str(lab.root / "ev.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    refused = lab.perfagent("check", str(lab.task), "--regrade", str(lab.root / "ev.json"))
    one_line(refused, "'another-task'", repr(lab.task_id))
    assert "grading" not in refused.stdout
    control = lab.perfagent("check", str(other), "--regrade", str(lab.root / "ev.json"))
    assert control.returncode == 0 and "grading 1 of 1" in control.stdout, control.stderr[-2000:]


def test_review_and_report_of_several_runs_ask_for_one(lab):
    write_job(lab.out, "run-a", Job(task="t1", model="rules", sample=0))
    write_job(lab.out, "run-b", Job(task="t2", model="anthropic:claude-sonnet-4-6", sample=0, verdict="fail"))
    root = lab.out / "results"
    for args in (("review", str(root)), ("report", str(root), "--html", str(lab.root / "r.html"))):
        line = one_line(lab.perfagent(*args), "holds 2 runs", "run-a", "run-b", "--all")
        assert str(root / "run-a") in line
    assert not (lab.root / "r.html").exists()
    pooled = lab.perfagent("review", str(root), "--all")
    assert pooled.returncode == 0 and "2 runs pooled into one view (--all): run-a, run-b" in pooled.stderr, pooled
    one = lab.perfagent("review", str(root / "run-a"))
    assert one.returncode == 0 and "t1" in one.stdout and "t2" not in one.stdout, one.stderr[-2000:]
