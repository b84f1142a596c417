"""Red team, recorded evidence: files the harness wrote and later trusts, edited by whoever holds the folder.

`perfagent check --regrade` grades the evidence a file says was recorded, and `--strict` makes that a CI
gate; a task's base that passed is remembered in the user's cache and not run again. Both are files
anyone with the folder can edit. Each attack below edits one and plays the next step through the CLI
(`perfagent` as a subprocess, on the tiny task of redteam.lab):

| attack                                                                 | must hold                             |
|------------------------------------------------------------------------|---------------------------------------|
| 1. a failing check's evidence file overwritten with a passing one's    | `--regrade --strict` exits 2, one     |
|    text (its MAC left as it was)                                       |   line, nothing graded, no "pass"     |
| 2. a checks.json written by hand in a job folder (no MAC at all: an    | the same, saying it carries no MAC    |
|    old run's, or one made elsewhere)                                   |   from this machine                   |
| 3. the remembered record of the task's base edited to say its tests    | the next check does not trust it: it  |
|    fail there (the change would be blamed on the task, exit 1)         |   checks the base again and grades    |
|                                                                        |   the change (fail, exit 0)           |
| 4. the candidate looks for the key, to seal what it forges             | the key is not there in the sandbox   |
|                                                                        |   (the home folder is an empty tmpfs) |

The controls (the same files unedited) grade as before, so the refusal is the seal's, not a blanket one.
Before evidence was sealed, 1 and 2 exited 0 printing pass and 3 named the task broken.
"""

from __future__ import annotations

import json
import shutil

import pytest

from agent.env.sandbox import isolation
from redteam.lab import Lab, Proc, make_lab

pytestmark = pytest.mark.skipif(isolation().mode != "bwrap", reason="bubblewrap is not usable on this machine")

RETURN = "return sum(range(n))"


def checked(lab: Lab, name: str, new: str, *args: str) -> Proc:
    """`perfagent check` of the edit RETURN -> `new`, its evidence kept in `<name>.json`."""
    diff = lab.root / f"{name}.diff"
    diff.write_text(lab.patch({"pkg/mod.py": lambda t: t.replace(RETURN, new)}))
    return lab.perfagent("check", str(lab.task), "--patch", str(diff), "--evidence", str(lab.root / f"{name}.json"),
                         "--json", str(lab.root / f"{name}-evaluation.json"), *args)


def regrade(lab: Lab, path, *args: str) -> Proc:
    return lab.perfagent("check", str(lab.task), "--regrade", str(path), "--strict", *args)


def refused(proc: Proc, why: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and why in lines[0], proc.stderr
    assert "nothing graded" in lines[0] and "Traceback" not in proc.stderr
    assert "pass" not in proc.stdout and "grading" not in proc.stdout, proc.stdout


def test_regrade_refuses_evidence_this_machine_did_not_seal(tmp_path):
    lab = make_lab(tmp_path, perf=False)
    good = checked(lab, "good", "return n * (n - 1) // 2")
    bad = checked(lab, "bad", "return sum(range(n)) + 1")
    assert good.returncode == 0 and bad.returncode == 0, (good.stderr[-2000:], bad.stderr[-2000:])
    assert json.loads((lab.root / "good-evaluation.json").read_text())["verdict"] == "pass"
    assert json.loads((lab.root / "bad-evaluation.json").read_text())["verdict"] == "fail"

    # controls: the files as the checks wrote them grade as they did
    ok = regrade(lab, lab.root / "good.json", "--json", "-")
    assert ok.returncode == 0 and json.loads(ok.stdout)[0]["verdict"] == "pass", ok.stderr
    assert regrade(lab, lab.root / "bad.json").returncode == 3

    # 1. the failing check's evidence overwritten with the passing one's text
    (lab.root / "bad.json").write_text((lab.root / "good.json").read_text())
    refused(regrade(lab, lab.root / "bad.json"), "has a MAC that does not verify")
    refused(regrade(lab, lab.root / "bad.json", "--json", "-"), "has a MAC that does not verify")

    # 2. a job folder's checks.json written by hand: no MAC at all
    job = lab.root / "forged-run" / "results" / "r1" / lab.task_id
    job.mkdir(parents=True)
    evidence = json.loads((lab.root / "good.json").read_text())
    (job / "checks.json").write_text(json.dumps([{"time": 0, "full": True, "evidence": evidence,
                                                  "evaluation": {"verdict": "pass"}}]))
    refused(regrade(lab, job), "carries no MAC from this machine's perfagent")
    # ... nor does a seal made with another key verify (a results folder copied from another machine)
    shutil.copy(lab.root / "good.json", job / "checks.json")
    (job / "checks.json.mac").write_text("0" * 64 + "\n")
    refused(regrade(lab, job / "checks.json"), "has a MAC that does not verify")


def test_an_edited_base_record_is_not_trusted_the_base_is_checked_again(tmp_path):
    lab = make_lab(tmp_path, perf=False)
    checking = "checking the task on its unchanged base"
    first = checked(lab, "bad", "return sum(range(n)) + 1")  # its tests fail: the base is checked, then remembered
    assert first.returncode == 0 and checking in first.stderr, first.stderr[-2000:]
    (record,) = (lab.home / ".cache" / "perfagent" / "bases").glob("*.json")
    again = checked(lab, "bad", "return sum(range(n)) + 1")
    assert again.returncode == 0 and checking not in again.stderr, "control: a sealed record is trusted"

    # 3. the record edited to say the base's tests fail there: the change would be blamed on the task
    runs = json.loads(record.read_text())
    assert runs["plain"]["passed"] is True
    runs["plain"].update(passed=False, exit_code=1, output_tail="E   AssertionError: forged")
    record.write_text(json.dumps(runs))
    after = checked(lab, "bad", "return sum(range(n)) + 1")
    assert after.returncode == 0, (after.returncode, after.stderr[-2000:])
    assert "not trusted" in after.stderr and checking in after.stderr, after.stderr[-2000:]
    assert json.loads((lab.root / "bad-evaluation.json").read_text())["verdict"] == "fail"
    assert json.loads(record.read_text())["plain"]["passed"] is True  # remembered anew, from the base's own run


def test_the_key_is_out_of_the_candidates_reach(tmp_path):
    lab = make_lab(tmp_path, perf=False)
    assert checked(lab, "first", "return n * (n - 1) // 2").returncode == 0
    key = lab.home / ".local" / "share" / "perfagent" / "evidence.key"
    assert key.is_file(), "the check made this user's key"
    # 4. the change passes only where it finds /etc/passwd (the probe works) and does not find the key
    probe = (f"sum(range(n)) + (100 if os.path.exists({str(key)!r}) else 0)"
             " + (0 if os.path.exists('/etc/passwd') else 1000)")
    diff = lab.root / "probe.diff"
    diff.write_text(lab.patch({"pkg/mod.py": lambda t: "import os\n" + t.replace(RETURN, f"return {probe}")}))
    proc, ev = lab.check(diff.read_text(), "--no-perf")
    # its tests pass (each conditional takes one arm only, so coverage calls it unverified: that is not this test)
    assert ev["correctness"]["plain"]["passed"] and ev["verdict"] in ("pass", "unverified"), (
        ev["verdict"], ev.get("reasons"), proc.stderr[-2000:])
    # control: the probe sees the key where the user shows its folder to the sandbox (what never to do)
    proc, ev = lab.check(diff.read_text(), "--no-perf", env={"PERFAGENT_SANDBOX_READ": str(key.parent)})
    assert ev["verdict"] == "fail", (ev["verdict"], proc.stderr[-2000:])
