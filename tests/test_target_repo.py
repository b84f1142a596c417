"""The bundled target (target_repo/, package `miniattn`) and its task specs.

What must hold for the tasks to mean anything:
* the target's own tests pass, plain and with uninitialised memory poisoned;
* the naive "zeros -> empty everywhere" change is caught by the poisoned run, and the
  failure names the mode that read an unwritten buffer;
* every expert reference patch applies with `git apply` and passes the poisoned tests;
* every task file parses and points at files that exist.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers import all_empty

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "target_repo"
TASKS = ROOT / "tasks"
GRAPH_MODES = {"decode", "local", "draft_topk1", "draft_topk2", "verify", "encoder"}
TASK_FILES = sorted(p for p in TASKS.glob("*.toml") if "tasks" not in tomllib.loads(p.read_text()))

pytestmark = pytest.mark.slow

SITECUSTOMIZE = """\
import torch
import torch.utils.deterministic
torch.use_deterministic_algorithms(True)
torch.utils.deterministic.fill_uninitialized_memory = True
"""


def copy_target(dst: Path) -> Path:
    shutil.copytree(TARGET, dst, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    return dst


def run_target_tests(cwd: Path, poison: str | None, site: Path, extra: list[str]) -> subprocess.CompletedProcess:
    """poison: None, "env" (the target's conftest switch) or "sitecustomize" (as the harness does)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "MINIATTN_"))}
    env.update(PYTHONDONTWRITEBYTECODE="1", MINIATTN_DEVICE="cpu", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    if poison == "env":
        env["MINIATTN_POISON"] = "1"
    elif poison == "sitecustomize":
        site.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, "tests"]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def failing_modes(output: str) -> set[str]:
    """Modes named by failing test ids such as `test_graph_replay[draft_topk2-bs3]`."""
    ids = re.findall(r"^(?:FAILED|ERROR) \S+::\w+\[([^\]]+)\]", output, flags=re.M)
    return {i.split("-")[0] for i in ids}


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


# ---------------------------------------------------------------- task files


def test_task_set_lists_every_task():
    assert {p.name for p in TASK_FILES} >= {"cuda-graph-buffers.toml"}
    assert len(TASK_FILES) >= 4
    data = tomllib.loads((TASKS / "all.toml").read_text())
    listed = [(TASKS / e).resolve() for e in data["tasks"]]
    assert all(p.is_file() for p in listed)
    assert sorted(listed) == sorted(p.resolve() for p in TASK_FILES)


def resolve_up(start: Path, rel: str) -> Path | None:
    for folder in [start, *start.parents]:
        if (folder / rel).exists():
            return folder / rel
    return None


@pytest.mark.parametrize("task_file", TASK_FILES, ids=lambda p: p.stem)
def test_task_file_is_complete(task_file: Path):
    spec = tomllib.loads(task_file.read_text())
    assert spec["id"] == task_file.stem
    for key in ("title", "repo", "base", "prompt", "focus", "protected", "requires_gpu"):
        assert key in spec, key
    assert spec["requires_gpu"] is False
    assert spec["protected"] == ["tests/**", "bench/**"]
    repo = resolve_up(task_file.parent, spec["repo"])
    assert repo is not None and repo.resolve() == TARGET.resolve()
    for f in spec["focus"]:
        assert (TARGET / f).is_file(), f

    assert spec["correctness"]["poison"] is True
    assert spec["correctness"]["command"].startswith("python -m pytest")
    perf = spec["perf"]
    assert perf["direction"] == "lower"
    script = perf["command"].split()[1]
    assert (TARGET / script).is_file(), script
    assert f'"{perf["metric"]}"' in (TARGET / script).read_text(), "the bench never prints that metric"

    patch = resolve_up(task_file.parent, spec["reference"]["patch"])
    assert patch is not None and patch.is_file()
    touched = re.findall(r"^diff --git a/(\S+) b/", patch.read_text(), flags=re.M)
    assert touched and all(not t.startswith(("tests/", "bench/")) for t in touched)
    budget = spec["budget"]
    assert budget["max_turns"] > 0 and budget["max_cost_usd"] > 0 and budget["timeout_s"] > 0


# ---------------------------------------------------------------- the target itself
#
# Every target-test run is a separate Python process (a few seconds each, mostly importing
# torch); the module starts them all at once on a small pool and each test waits for its own.


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("target")
    jobs, info = {}, {}
    for poison in ("plain", "env"):
        jobs[f"original-{poison}"] = (copy_target(base / f"original-{poison}"),
                                      None if poison == "plain" else poison, ["-rs"])
    # the harness poisons through a sitecustomize; the target's own switch is checked by the
    # original-env run (its test_poison_mode_fills_uninitialised_memory runs only then)
    repo = copy_target(base / "empty-sitecustomize")
    info["empty-sitecustomize"] = all_empty(repo)
    jobs["empty-sitecustomize"] = (repo, "sitecustomize", ["-k", "graph"])  # only graph tests use them
    for task_file in TASK_FILES:
        spec = tomllib.loads(task_file.read_text())
        patch = resolve_up(task_file.parent, spec["reference"]["patch"]).resolve()
        repo = copy_target(base / f"patch-{task_file.stem}")
        git(repo, "init", "-q")
        check = git(repo, "apply", "--check", str(patch))
        applied = check.returncode == 0 and git(repo, "apply", str(patch)).returncode == 0
        info[f"patch-{task_file.stem}"] = (applied, check.stderr)
        if applied:
            jobs[f"patch-{task_file.stem}"] = (repo, "env", [])
    workers = max(1, min(4, os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {
            name: pool.submit(run_target_tests, repo, poison, base / f"site-{name}", extra)
            for name, (repo, poison, extra) in jobs.items()
        }
        yield {name: f.result for name, f in futures.items()}, info


@pytest.mark.parametrize("poison", ["plain", "env"], ids=["plain", "poisoned"])
def test_original_target_passes(runs, poison):
    proc = runs[0][f"original-{poison}"]()
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout
    # the poison self-check runs only when the switch is on
    assert ("MINIATTN_POISON=1 not set" in proc.stdout) == (poison == "plain"), proc.stdout[-2000:]


def test_zeros_to_empty_everywhere_is_caught(runs):
    assert runs[1]["empty-sitecustomize"] >= 10
    proc = runs[0]["empty-sitecustomize"]()
    assert proc.returncode != 0, "poisoned tests passed with every graph buffer uninitialised"
    modes = failing_modes(proc.stdout)
    assert modes, proc.stdout[-4000:]
    assert modes <= GRAPH_MODES, modes
    # the buffers read before warm-up / replay wrote them span several modes
    assert len(modes) >= 3, modes


@pytest.mark.parametrize("task_file", TASK_FILES, ids=lambda p: p.stem)
def test_reference_patch_applies_and_is_safe(runs, task_file: Path):
    applied, err = runs[1][f"patch-{task_file.stem}"]
    assert applied, err
    proc = runs[0][f"patch-{task_file.stem}"]()
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
