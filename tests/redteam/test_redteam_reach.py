"""Red team, reach: what a sandboxed command can see of the machine, and how much of it it can take.

The lab lives where the old sandbox showed the whole machine read-only (`visible_root`: the
checkout's results folder), with perfagent's TMPDIR inside it, so on the old sandbox every file
below was readable. Each file holds a marker; a marker in a tool result or an evaluation means
the command read it.

| attack (played through)                                              | must hold                            |
|----------------------------------------------------------------------|--------------------------------------|
| read the task file, a reference patch beside it, an earlier run's    | no marker comes back                 |
|   report in --out, a file of the user's checkout left out of the     |                                      |
|   workspace, another folder, perfagent's own source, and list the    |                                      |
|   checker's folders (`run`; the tests and the bench: `perfagent      |                                      |
|   check`)                                                            |                                      |
| fork 400 processes as root from the tests (`perfagent check`, cap    | forks refused before 400             |
|   200)                                                               |                                      |
| park 1.5 GiB in shared memory, which RLIMIT_DATA does not count      | killed before it holds it all        |
|   (`perfagent check`, cap 512 MiB)                                   |                                      |
| a task whose tests name a folder its sandbox hides                   | verdict error, saying which folder   |
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from agent.env import cgroup
from agent.env.sandbox import isolation
from redteam.lab import AGENT_ROOT, SAFE_EDIT, call, make_lab, visible_root

pytestmark = pytest.mark.skipif(isolation().mode != "bwrap", reason="bubblewrap is not usable on this machine")

MARKS = {name: f"REDTEAM-{name.upper()}-{uuid.uuid4().hex[:8]}" for name in
         ("task", "reference", "results", "checkout", "outside", "tmpdir")}


SOURCE_FILE = AGENT_ROOT / "agent" / "cli" / "__init__.py"
SOURCE = SOURCE_FILE.read_text().splitlines()[0]  # what `head` of it would show


def plant(lab) -> dict[str, Path]:
    """A marker in each place no sandboxed command may read; returns where each one is."""
    places = {
        "task": lab.task,
        "reference": lab.task.parent / "reference.diff",
        "results": lab.out / "results" / "r0" / lab.task_id / "report.json",
        "checkout": lab.src / "NOTES.txt",  # the user's checkout, not in git: never in a workspace
        "outside": lab.outside / "secret.txt",
        "tmpdir": lab.tmp / "workspaces.txt",  # perfagent's TMPDIR: its workspaces and checkouts
    }
    for name, path in places.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write(f"\n# {MARKS[name]}\n")
    return places


def readers(places: dict[str, Path], lab) -> str:
    """Shell: print every planted file, perfagent's own source, and what lies in perfagent's TMPDIR."""
    cats = "; ".join(f"cat {p} 2>&1" for p in places.values())
    return f"{cats}; head -c 300 {SOURCE_FILE} 2>&1; ls -R {lab.tmp} 2>&1 | head -50 | sed 's/^/LS /'"


@pytest.mark.slow(seconds=20)
def test_run_sees_no_task_reference_results_checkout_or_harness(tmp_path):
    """Attack: the agent's `run` reads the task file, the reference patch, an earlier run's results, the
    user's checkout, another folder and perfagent's source, and lists the checker's folders."""
    with visible_root(tmp_path / "lab") as root:
        lab = make_lab(root, perf=False)
        places = plant(lab)
        out = lab.run([[call("run", "look", command=readers(places, lab))],
                       [call("edit_file", **SAFE_EDIT)], [call("submit", summary="closed form")]])
        seen = out.results().get("look", "")
        assert out.report.is_file(), out.proc.stderr[-2000:]
    assert seen, "the probe did not run"
    leaked = [name for name, mark in MARKS.items() if mark in seen]
    assert not leaked, f"`run` read {leaked}:\n{seen[:2000]}"
    assert SOURCE not in seen, f"`run` read perfagent's source:\n{seen[:2000]}"
    assert "LS workspaces.txt" not in seen, f"`run` listed perfagent's TMPDIR:\n{seen}"


PROBE = '''import subprocess
subprocess.run({readers!r}, shell=True)
raise RuntimeError("PROBE-RAN")
'''


@pytest.mark.slow(seconds=15)
def test_tests_see_no_task_reference_results_checkout_or_harness(tmp_path):
    """Attack: package code run by the tests reads the same places and prints them into the evaluation."""
    with visible_root(tmp_path / "lab") as root:
        lab = make_lab(root, perf=False)
        places = plant(lab)
        proc, ev = lab.check(lab.patch({"pkg/__init__.py": PROBE.format(readers=readers(places, lab))}))
    blob = proc.stdout + proc.stderr
    assert "PROBE-RAN" in blob, f"the probe did not run: {ev.get('reasons')}"
    leaked = [name for name, mark in MARKS.items() if mark in blob]
    assert not leaked, f"the tests read {leaked}"
    assert "LS workspaces.txt" not in blob, "the tests listed perfagent's TMPDIR"
    assert SOURCE not in blob, "the tests read perfagent's source"


FORKS = '''import os, time
n = 0
try:
    for n in range(400):
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
except OSError:
    pass
raise RuntimeError(f"FORKED {n + 1}")
'''
SHARED = '''import mmap
size = 1536 << 20
m = mmap.mmap(-1, size)  # MAP_SHARED | MAP_ANONYMOUS: shmem, outside RLIMIT_DATA
for i in range(0, size, 4096):
    m[i] = 1
raise RuntimeError("MAPPED-ALL")
'''


@pytest.mark.skipif(not cgroup.available(), reason="no cgroup can be made on this machine")
@pytest.mark.slow(seconds=15)
def test_a_fork_bomb_from_the_tests_is_capped_for_root_too(tmp_path):
    """Attack: the tests fork 400 processes; root is exempt from RLIMIT_NPROC, a cgroup is not."""
    lab = make_lab(tmp_path, perf=False)
    proc, ev = lab.check(lab.patch({"pkg/__init__.py": FORKS}), env={"PERFAGENT_SANDBOX_PROCESSES": "200"})
    blob = proc.stdout + proc.stderr
    forked = re.search(r"FORKED (\d+)", blob)
    assert forked, f"the probe did not run: {ev.get('reasons')}"
    assert int(forked[1]) < 200, f"the tests forked {forked[1]} processes under a cap of 200"
    assert "200 processes" in (ev.get("environment") or {}).get("limits", ""), ev.get("environment")


@pytest.mark.skipif(not cgroup.available(), reason="no cgroup can be made on this machine")
@pytest.mark.slow(seconds=15)
def test_shared_memory_counts_against_the_cap(tmp_path):
    """Attack: the tests park 1.5 GiB in a shared mapping, which RLIMIT_DATA never counts."""
    lab = make_lab(tmp_path, perf=False)
    proc, ev = lab.check(lab.patch({"pkg/__init__.py": SHARED}), env={"PERFAGENT_SANDBOX_MEMORY": "512M"})
    assert "MAPPED-ALL" not in proc.stdout + proc.stderr, "1.5 GiB of shared memory under a 512 MiB cap"
    assert ev["verdict"] == "fail", ev.get("reasons")


def test_a_task_naming_a_hidden_folder_is_an_error_that_names_it(tmp_path):
    """A broken task, not a broken change: its tests run a script from a folder the sandbox hides."""
    lab = make_lab(tmp_path, perf=False)
    tool = lab.outside / "runtests.sh"
    tool.write_text("#!/bin/sh\nexec python -m pytest -q -p no:cacheprovider tests\n")
    tool.chmod(0o755)
    lab.task.write_text(lab.task.read_text().replace('command = "python -m pytest -q -p no:cacheprovider tests"',
                                                    f'command = "{tool}"'))
    patch = lab.root / "safe.diff"
    patch.write_text(lab.patch({"pkg/mod.py": lambda t: t.replace(SAFE_EDIT["old"], SAFE_EDIT["new"])}))
    proc = lab.perfagent("check", str(lab.task), "--patch", str(patch), "--json", "-")
    said = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and not proc.stdout.strip(), proc.stdout  # nothing graded
    assert said.startswith("error: the task cannot be checked: its tests fail on the unchanged base"), said
    assert "exit 127" in said and str(tool) in said and "`read`" in said, said
    lab.task.write_text(lab.task.read_text().replace('prompt =', f'read = ["{lab.outside}"]\nprompt ='))
    proc = lab.perfagent("check", str(lab.task), "--patch", str(patch), "--json", "-")
    ev = json.loads(proc.stdout)
    assert proc.returncode == 0 and ev["verdict"] == "pass", ev


BORROW = '''import glob, importlib.util, os, sys
if os.path.basename(sys.argv[0]) == "bench.py":
    here = os.path.realpath(os.path.join(os.path.dirname(__file__), "mod.py"))
    found = []
    for pattern in ("../../side-*/*/pkg/mod.py", "/perfagent/side-*/*/pkg/mod.py",
                    "/proc/1/root/perfagent/side-*/*/pkg/mod.py"):
        found += glob.glob(pattern)
    found += [f"/perfagent/side-{n}/repo/pkg/mod.py" for n in range(3)]
    for path in found:
        try:
            text = open(path).read()
        except OSError:
            continue
        if os.path.realpath(path) != here and "0.002" in text:  # the reference's faster work()
            spec = importlib.util.spec_from_file_location("pkg.mod", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules["pkg.mod"] = module
            break
'''


@pytest.mark.slow(seconds=40)
def test_the_candidates_bench_cannot_time_the_reference_as_its_own(tmp_path):
    """Attack: every side's bench is a child of one warm server whose sandbox shows all three checkouts;
    the candidate's bench finds the reference's checkout and times its (faster) code instead of its own."""
    lab = make_lab(tmp_path, perf=True)
    reference = tmp_path / "reference.diff"
    reference.write_text(lab.patch({"pkg/mod.py": lambda t: t.replace("time.sleep(0.02)", "time.sleep(0.002)")}))
    lab.task.write_text(lab.task.read_text() + f'[reference]\npatch = "{reference}"\n')
    proc, ev = lab.check(lab.patch({"pkg/__init__.py": BORROW}), "--reference")
    assert ev["perf"] and ev["perf"]["candidate_samples"], ev.get("reasons")
    assert "warm server" in ev["perf"]["processes"], ev["perf"]["processes"]
    assert ev["perf"]["verdict"] != "faster", f"the candidate timed the reference's code: {ev['perf']}"
