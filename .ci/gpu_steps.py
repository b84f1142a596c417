"""The GPU checks, step by step (started by `.ci/gpu`; docs/gpu.md: "Running the GPU checks").

GPU time comes rarely and briefly, so one run proves every CUDA path of perfagent and keeps every
figure: the bundled target's tests on CUDA (plain, poisoned, real graph capture and replay), the
naive all-`torch.empty` change caught (poisoned tests name the modes, the sanitizer the buffers,
compute-sanitizer's initcheck the kernels), the reference patch graded with CUDA-event timings,
an A/A that must find no difference, a batch whose measurements must never overlap on the device,
a padded (non-captured) batch size under poison, and the padding matrix: every graph mode at three
batch-size classes, graph and eager, poisoned and under initcheck, for the all-empty change and the
reference. Each step goes on after a failed one; the
most important run first, and a step that would start past the time budget is skipped, saying so.

Out, under $OUT: summary.json (each step's pass/fail and figures), gpu.log (every command's
output), evaluations.json (every `perfagent check` evaluation). `--dry-run` runs the same steps on
the CPU with a compute-sanitizer emulator first on PATH (tests/gpu/fake-compute-sanitizer), so
the script's own logic is tested in CI before it meets a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "target_repo"
TASK = ROOT / "tasks" / "cuda-graph-buffers.toml"
REFERENCE = ROOT / "tasks" / "reference" / "cuda-graph-buffers.diff"
EMULATOR = ROOT / "tests" / "gpu" / "fake-compute-sanitizer"
GRAPH_MODES = {"decode", "local", "draft_topk1", "draft_topk2", "verify", "encoder"}
# The graded task's tests: every graph mode at a padded batch size (3, replayed on the graph captured
# for 4) and against eager, and the extend paths (read sites of the graph buffers: without them the
# reference is "unverified"). Also what runs under initcheck, which is slow; the full suite runs first.
GRADED_TESTS = 'python -m pytest -q tests -k "graph_matches_eager or bs3 or extend"'


@dataclass(frozen=True)
class Scale:
    """What a run times beyond the steps' logic. A GPU run: everything as written. The dry run rehearses
    the same steps, commands and checks on the CPU, where a check's cost is its processes' start-up
    (torch's import in each), not the tests it runs: only the bench's own calls are worth cutting."""

    # The graded bench's timed calls (None: the task's 20). perfagent forks the bench warm, so its process
    # costs what the calls do, and the A/A on a CPU always takes all 20 pairs: the dry run times 5 calls.
    bench_repeats: int | None = None
    # The graded task's `max_pairs` (None: perfagent's 20): the dry run's A/A stops by 7, and so does its reference.
    max_pairs: int | None = None


GPU_SCALE = Scale()
DRY_SCALE = Scale(bench_repeats=5, max_pairs=7)
BENCH = 'command = "python bench/bench_graph_init.py"\n'  # the task's perf command, as graded_task finds it

sys.path.insert(0, str(ROOT / "tests"))
from helpers import all_empty  # noqa: E402

from agent.util.files import read_json, write_json  # noqa: E402


class StepFailed(Exception):
    """A step ran and its evidence says no; `figures` are what it saw all the same."""

    def __init__(self, why: str, figures: dict | None = None):
        super().__init__(why)
        self.figures = figures or {}


@dataclass
class Run:
    out: Path
    work: Path
    dry: bool
    deadline: float
    full_batch: bool = False
    evaluations: dict = field(default_factory=dict)

    @property
    def scale(self) -> Scale:
        return DRY_SCALE if self.dry else GPU_SCALE

    @property
    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def log(self, text: str) -> None:
        with open(self.out / "gpu.log", "a") as f:
            f.write(text)

    def sh(self, name: str, argv: list[str], cwd: Path = ROOT, env: dict | None = None,
           timeout_s: float = 300) -> tuple[int, str]:
        """Run a command to the end (or its timeout, exit 124), its output in gpu.log."""
        timeout_s = max(10.0, min(timeout_s, self.left_s + 30))
        start = time.monotonic()
        try:
            proc = subprocess.run(argv, cwd=cwd, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout_s)
            rc, output = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as e:
            out = e.stdout or ""
            rc, output = 124, out.decode(errors="replace") if isinstance(out, bytes) else out
            output += f"\n[timed out after {timeout_s:.0f}s]"
        took = time.monotonic() - start
        self.log(f"\n=== {name}: {' '.join(argv)} (in {cwd})\n{output}\n--- exit {rc} in {took:.1f}s\n")
        return rc, output

    def perfagent(self, name: str, args: list[str], timeout_s: float = 400) -> dict:
        """`perfagent check ... --json F`; the evaluation, also kept in evaluations.json."""
        path = self.work / f"{name}.json"
        rc, output = self.sh(name, [sys.executable, "-m", "agent", *args, "--json", str(path)], timeout_s=timeout_s)
        if not path.is_file():
            raise StepFailed(f"perfagent exited {rc} without an evaluation: {output.strip()[-300:]}")
        ev = json.loads(path.read_text())
        self.evaluations[name] = ev
        write_json(self.out / "evaluations.json", self.evaluations)
        return ev


# -- what the steps share ---------------------------------------------------------------------------
def target_env(run: Run, poison: bool = False) -> dict:
    env = {"PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
           "MINIATTN_POISON": "1" if poison else "0"}
    if run.dry:
        env["MINIATTN_DEVICE"] = "cpu"
    return env


def target_copy(run: Run, name: str, edit: Callable[[Path], object] | None = None) -> Path:
    dst = run.work / name
    if not dst.exists():
        shutil.copytree(TARGET, dst, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        if edit is not None:
            edit(dst)
    return dst


def reference_copy(run: Run) -> Path:
    return target_copy(run, "reference", lambda repo: subprocess.run(["git", "apply", str(REFERENCE)], cwd=repo,
                                                                       check=True))


def pytest_run(run: Run, name: str, repo: Path, *args: str, poison: bool = False, timeout_s: float = 300) -> dict:
    """pytest in a copy of the target; counts from its JUnit XML, failing modes from its summary."""
    xml = run.work / f"{name}.xml"
    rc, output = run.sh(name, [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                               f"--junitxml={xml}", *args, "tests"], cwd=repo, env=target_env(run, poison),
                        timeout_s=timeout_s)
    cases = ET.parse(xml).getroot().iter("testcase") if xml.is_file() else []
    outcome = {}
    for case in cases:
        kind = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
        outcome[f"{case.get('name')}"] = kind
    counts = {k: sum(v == k for v in outcome.values()) for k in ("passed", "failure", "error", "skipped")}
    failed = [t for t, k in outcome.items() if k in ("failure", "error")]
    return {"exit": rc, **counts, "failing_modes": sorted(modes_of(failed)), "failing": failed[:12],
            "outcomes": outcome}


def modes_of(test_ids: list[str]) -> set[str]:
    """Modes named by test ids such as `test_graph_replay[draft_topk2-bs3]`."""
    return {m.group(1).split("-")[0] for t in test_ids if (m := re.search(r"\[([^\]]+)\]", t))} & GRAPH_MODES


def diff_of(run: Run, name: str, edit: Callable[[Path], object]) -> Path:
    """A git diff of `edit` applied to the target, as `perfagent check --patch` takes it."""
    repo = run.work / f"diff-{name}"
    shutil.copytree(TARGET, repo, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    git = ["git", "-c", "user.name=gpu", "-c", "user.email=gpu@localhost", "-c", "core.hooksPath=/dev/null"]
    subprocess.run(git + ["init", "-q"], cwd=repo, check=True)
    subprocess.run(git + ["add", "-A"], cwd=repo, check=True)
    subprocess.run(git + ["commit", "-qm", "base"], cwd=repo, check=True)
    edit(repo)
    patch = run.work / f"{name}.diff"
    patch.write_text(subprocess.run(git + ["diff"], cwd=repo, check=True, capture_output=True, text=True).stdout)
    return patch


def a_comment(repo: Path) -> None:
    """The A/A change: identical code, one comment more."""
    path = repo / "miniattn" / "flashattention_backend.py"
    path.write_text(path.read_text() + "# A/A: this line changes nothing\n")


def graded_task(run: Run, name: str, *, initcheck: bool, reference: Path = REFERENCE) -> Path:
    """The bundled task with GRADED_TESTS as its tests (and initcheck on or off), repo and reference absolute."""
    text = TASK.read_text()
    text = text.replace('repo = "target_repo"', f'repo = "{TARGET}"')
    text = text.replace('patch = "tasks/reference/cuda-graph-buffers.diff"', f'patch = "{reference}"')
    text = re.sub(r'(?m)^command = "python -m pytest[^"\n]*"$', lambda _: f"command = {json.dumps(GRADED_TESTS)}"
                  + "\ntimeout_s = 240" + ("\ninitcheck = true" if initcheck else ""), text, count=1)
    if run.scale.bench_repeats is not None:
        if BENCH not in text:
            raise StepFailed(f"the task's perf command is no longer {BENCH.strip()}")
        text = text.replace(BENCH, BENCH.replace('.py"', f'.py --repeats {run.scale.bench_repeats}"'), 1)
    if run.scale.max_pairs is not None:
        if "\n[perf]\n" not in text:
            raise StepFailed("the task has no [perf] table to cap")
        text = text.replace("\n[perf]\n", f"\n[perf]\nmax_pairs = {run.scale.max_pairs}\n", 1)
    task = run.work / f"{name}.toml"
    task.write_text(text)
    return task


def perf_figures(ev: dict) -> dict:
    p = ev.get("perf") or {}
    keep = ("verdict", "ratio", "ci_low", "ci_high", "speedup", "p_value", "n_pairs", "cv", "stop_reason", "timer",
            "processes", "device", "lock_wait_s", "duration_s", "unit", "baseline_median", "candidate_median", "error")
    first = p.get("first_call") or {}  # the first call alone, from the samples' own processes (first_call_metric)
    return {**{k: p.get(k) for k in keep},
            "first_call": {"verdict": first.get("verdict"), "ratio": first.get("ratio"),
                           "pairs": len(first.get("candidate_samples") or [])} if first else None}


def initcheck_figures(ev: dict) -> dict:
    ic = ev.get("initcheck") or {}
    run = ic.get("run") or {}
    plain = ((ev.get("correctness") or {}).get("plain") or {}).get("duration_s")
    return {"measured": ic.get("measured"), "note": ic.get("note"), "tool": ic.get("tool"), "errors": ic.get("errors"),
            "reads": [f"{r['kernel'][:120]} ({r.get('count')})" for r in ic.get("reads", [])],
            "at_base": [f"{r['kernel'][:120]} ({r.get('count')})" for r in ic.get("at_base", [])],
            "copies": [f"{r['kernel'][:120]} ({r.get('count')})" for r in ic.get("copies", [])],
            "run_s": run.get("duration_s"), "baseline_s": ic.get("baseline_s"), "plain_tests_s": plain,
            "slowdown": round(run["duration_s"] / plain, 1) if run.get("duration_s") and plain else None}


def environment_figures(ev: dict) -> dict:
    env = ev.get("environment") or {}
    keep = ("gpu", "gpu_driver", "torch", "cuda", "device", "isolation", "gpu_sm_clock_mhz", "gpu_mem_clock_mhz",
            "gpu_max_sm_clock_mhz", "gpu_clocks_locked", "cpu", "cpu_count")
    return {k: env.get(k) for k in keep}


def expect_timer(run: Run, perf: dict) -> None:
    """On a GPU the bench must time with CUDA events after an L2 flush; on the CPU with the wall clock."""
    want = "wall-clock" if run.dry else "cuda-events, L2 flushed"
    if perf.get("timer") != want:
        raise StepFailed(f"the bench timed with {perf.get('timer')!r}, not {want!r}")


# -- the steps --------------------------------------------------------------------------------------
def step_environment(run: Run) -> dict:
    from agent.env.gpu import nvidia_gpus
    from agent.env.sandbox import isolation

    probe = ("import json, torch; c = torch.cuda.is_available(); "
             "p = torch.cuda.get_device_properties(0) if c else None; "
             "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, 'available': c, "
             "'device': p.name if p else None, 'sms': p.multi_processor_count if p else None, "
             "'l2_mb': round(getattr(p, 'L2_cache_size', 0) / 2**20, 1) if p else None}))")
    rc, output = run.sh("torch", [sys.executable, "-c", probe], timeout_s=120)
    torch_info = json.loads(output.strip().splitlines()[-1]) if rc == 0 else {"error": output.strip()[-300:]}
    sanitizer = shutil.which("compute-sanitizer") or next(
        (str(p) for p in (Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "compute-sanitizer",)
         if p.is_file()), None)
    version = run.sh("compute-sanitizer", [sanitizer, "--version"], timeout_s=60)[1].splitlines() if sanitizer else []
    iso = isolation()
    figures = {"gpus": [g.__dict__ for g in nvidia_gpus()], **torch_info, "python": sys.version.split()[0],
               "compute_sanitizer": (version[-1].strip() if version else None), "compute_sanitizer_path": sanitizer,
               "isolation": iso.mode, "not_isolated": list(iso.missing), "bwrap": shutil.which("bwrap"),
               "cpus": os.cpu_count()}
    if not run.dry and not torch_info.get("available"):
        raise StepFailed("torch sees no CUDA device", figures)
    return figures


def step_target_tests(run: Run) -> dict:
    """The full suite on the device, plain and poisoned at once; on CUDA the graph tests must have
    replayed real captured graphs (they fail if a replay calls the model's Python forward)."""
    repo = target_copy(run, "target")
    with ThreadPoolExecutor(2) as pool:
        plain, poison = pool.map(lambda p: pytest_run(run, f"target-{'poisoned' if p else 'plain'}", repo, poison=p),
                                 (False, True))
    graphs = [k for t, k in plain["outcomes"].items() if t.startswith("test_replay_runs_the_captured_graph")]
    figures = {"plain": _counts(plain), "poisoned": _counts(poison),
               "captured_graph_tests": {"passed": graphs.count("passed"), "skipped": graphs.count("skipped"),
                                        "failed": len(graphs) - graphs.count("passed") - graphs.count("skipped")}}
    if plain["exit"] or poison["exit"]:
        raise StepFailed(f"target tests fail: plain {plain['failing'][:4]}, poisoned {poison['failing'][:4]}", figures)
    if not run.dry and graphs.count("passed") != len(GRAPH_MODES):
        raise StepFailed("the CUDA-graph replay tests did not all pass", figures)
    return figures


def _counts(r: dict) -> dict:
    return {k: r[k] for k in ("exit", "passed", "failure", "error", "skipped", "failing")}


def step_all_empty(run: Run) -> dict:
    """The naive change: every buffer of init_cuda_graph_state allocated with torch.empty."""
    repo = target_copy(run, "all-empty", all_empty)
    direct = pytest_run(run, "all-empty-poisoned", repo, "-k", "graph", poison=True)
    patch = diff_of(run, "all-empty", all_empty)
    ev = run.perfagent("check-all-empty", ["check", str(graded_task(run, "graded-initcheck", initcheck=True)),
                                            "--patch", str(patch), "--no-perf"])
    san = ev.get("sanitizer") or {}
    figures = {"poisoned_tests": {"exit": direct["exit"], "failing_modes": direct["failing_modes"],
                                  "failed": direct["failure"] + direct["error"], "passed": direct["passed"]},
               "check": {"verdict": ev.get("verdict"), "reasons": [r[:300] for r in ev.get("reasons", [])],
                         "poison_failing": ((ev.get("correctness") or {}).get("poison") or {}).get("failing_tests"),
                         "duration_s": ev.get("duration_s")},
               "sanitizer": {"measured": san.get("measured"), "note": san.get("note"),
                             "buffers": sorted({f"{r['buffer']} {r.get('code', '')[:80]}"
                                                for r in san.get("reads", [])})},
               "initcheck": initcheck_figures(ev), "environment": environment_figures(ev)}
    problems = []
    if direct["exit"] == 0 or len(direct["failing_modes"]) < 3:
        problems.append(f"poisoned tests named {direct['failing_modes']} (want 3 or more modes)")
    if ev.get("verdict") != "fail":
        problems.append(f"verdict {ev.get('verdict')}, want fail")
    if not figures["sanitizer"]["buffers"]:
        problems.append("the sanitizer named no buffer")
    if not figures["initcheck"]["reads"]:
        problems.append(f"initcheck named no kernel ({figures['initcheck']['note'] or 'measured, none found'})")
    if problems:
        raise StepFailed("; ".join(problems), figures)
    return figures


def step_reference(run: Run) -> dict:
    """The expert patch, graded with perf (CUDA events, L2 flushed) and measured beside itself as reference."""
    ev = run.perfagent("check-reference", ["check", str(graded_task(run, "graded-initcheck", initcheck=True)),
                                            "--patch", str(REFERENCE), "--reference"])
    ref = ev.get("reference") or {}
    figures = {"verdict": ev.get("verdict"), "reasons": [r[:300] for r in ev.get("reasons", [])],
               "perf": perf_figures(ev),
               "reference": {k: ref.get(k) for k in ("speedup", "ci_low", "ci_high", "verdict")},
               "initcheck": initcheck_figures(ev), "environment": environment_figures(ev),
               "duration_s": ev.get("duration_s")}
    if ev.get("verdict") != "pass":
        raise StepFailed(f"verdict {ev.get('verdict')}: {ev.get('reasons', [])[:3]}", figures)
    expect_timer(run, figures["perf"])
    if not figures["initcheck"]["measured"] or figures["initcheck"]["reads"]:
        raise StepFailed(f"initcheck on the reference: {figures['initcheck']}", figures)
    return figures


def step_a_a(run: Run) -> dict:
    """Identical code on both sides must not be called faster or slower. The same comment is measured as the
    reference too: on an H200 the baseline side read slower than the identical candidate in 8 pairs of 8
    (ratio 0.84), and a third identical side tells a bias of the baseline's role from chance."""
    patch = diff_of(run, "a-a", a_comment)
    ev = run.perfagent("check-a-a", ["check", str(graded_task(run, "graded-a-a", initcheck=False, reference=patch)),
                                     "--patch", str(patch), "--reference"])
    ref = ev.get("reference") or {}
    figures = {"verdict": ev.get("verdict"), "perf": perf_figures(ev),
               "reference": {k: ref.get(k) for k in ("ratio", "ci_low", "ci_high", "verdict")},
               "duration_s": ev.get("duration_s")}
    # The statistics' own call, not the verdict: the rule that no changed line ran in the bench (a comment's
    # cannot) turns any "faster" here into "not confirmed", which hid the H200's biased interval.
    off = [side for side, f in (("candidate", figures["perf"]), ("reference", figures["reference"]))
           if f.get("ci_low") is not None and (f["ci_low"] > 1 or f["ci_high"] < 1)]
    if figures["perf"]["verdict"] in ("faster", "slower", None) or off:
        raise StepFailed(f"A/A perf verdict {figures['perf']['verdict']}; the 95% interval leaves out 1 for "
                         f"{' and '.join(off) or 'neither'} (the reference: {figures['reference']['verdict']})",
                         figures)
    expect_timer(run, figures["perf"])
    return figures


def step_batch(run: Run) -> dict:
    """`perfagent batch --gpus 0 --workers 2`: two jobs at once, their measurements one at a time.
    The contestant replays the reference change (one write, one submit; all four tasks share the
    target), so each job's time goes to its grading and two gradings' measurements contend for the device."""
    out = run.work / "batch"
    edited = "miniattn/flashattention_backend.py"
    turns = [[{"id": "w", "name": "write_file",
               "input": {"path": edited, "content": (reference_copy(run) / edited).read_text()}}],
             [{"id": "s", "name": "submit", "input": {"summary": "the reference change, replayed"}}]]
    replay = run.work / "replay.jsonl"
    replay.write_text("".join(json.dumps({"type": "response", "turn": n, "text": "", "stop_reason": "tool_use",
                                          "tool_calls": calls}) + "\n" for n, calls in enumerate(turns, 1)))
    # Two samples of one task by default: the whole set samples three of its four tasks' unchanged metrics
    # to precision, one measurement at a time, which took over 4 minutes on an H100 (`--full-batch`).
    tasks = [str(ROOT / "tasks")] if run.full_batch else [str(TASK), "--samples", "2"]
    args = ["batch", *tasks, "--models", f"replay:{replay}", "--gpus", "0", "--workers", "2",
            "--run-id", "gpu", "--out", str(out), "--quiet", "--no-baseline",
            "--job-timeout", str(max(60, int(run.left_s - 30)))]
    rc, output = run.sh("batch", [sys.executable, "-m", "agent", *args], timeout_s=run.left_s)
    for log in sorted((out / "results" / "gpu").rglob("batch.log")):  # each job's timed steps, for the record
        run.log(f"\n=== {log.relative_to(out)}\n{log.read_text(errors='replace')[-6000:]}")
    measured = [p for p in perfs_of(out / "results" / "gpu") if p.get("started_at")]
    by_device: dict[str, list[dict]] = {}
    for p in measured:
        by_device.setdefault(p.get("device") or "?", []).append(p)
    overlaps = []
    for device, ps in by_device.items():
        ps.sort(key=lambda p: p["started_at"])
        for a, b in zip(ps, ps[1:]):
            if b["started_at"] < a["started_at"] + a["duration_s"] - 0.02:  # both rounded to 10 ms at most
                overlaps.append(f"{device}: {a['job']} until {a['started_at'] + a['duration_s']:.2f}, "
                                f"{b['job']} from {b['started_at']:.2f}")
    waits = [p["lock_wait_s"] for p in measured]
    summary = read_json(out / "results" / "gpu" / "summary.json")
    figures = {"exit": rc, "measurements": len(measured), "devices": sorted(by_device),
               "jobs_measured": sorted({p["job"] for p in measured}), "overlaps": overlaps,
               "lock_waits_s": sorted(waits, reverse=True)[:10], "lock_wait_total_s": round(sum(waits), 2),
               "waited": sum(w > 0.05 for w in waits), "tail": output.strip()[-600:],
               "jobs": summary.get("jobs") if isinstance(summary, dict) else None}
    if overlaps:
        raise StepFailed(f"{len(overlaps)} measurements overlapped on one device", figures)
    if rc == 124:
        raise StepFailed("the batch did not finish within the budget", figures)
    if len(figures["jobs_measured"]) < 2:
        raise StepFailed("fewer than two jobs measured anything: the lock was never contended", figures)
    return figures


def perfs_of(results: Path) -> list[dict]:
    """Every perf measurement of a batch's jobs (checks.json, and report.json's final evaluation)."""
    seen, out = set(), []
    for path in sorted(results.rglob("checks.json")) + sorted(results.rglob("report.json")):
        data = read_json(path)
        evs = [e.get("evaluation") for e in data] if isinstance(data, list) else [(data or {}).get("evaluation")]
        for ev in evs:
            p = (ev or {}).get("perf") or {}
            key = (p.get("started_at"), p.get("device"))
            if p.get("started_at") and key not in seen:
                seen.add(key)
                out.append({**p, "job": str(path.parent.relative_to(results))})
    return out


def step_padded(run: Run) -> dict:
    """Batch size 3 replayed on the graph captured for 4, poisoned: where this kind of bug shows."""
    runs = {name: pytest_run(run, f"padded-{name}", repo, "-k", "bs3", poison=True)
            for name, repo in (("base", target_copy(run, "target")), ("reference", reference_copy(run)),
                               ("all_empty", target_copy(run, "all-empty", all_empty)))}
    figures = {name: {"exit": r["exit"], "passed": r["passed"], "failed": r["failure"] + r["error"],
                      "failing_modes": r["failing_modes"]} for name, r in runs.items()}
    if runs["base"]["exit"] or runs["reference"]["exit"] or not runs["all_empty"]["exit"]:
        raise StepFailed("want base and reference to pass and all-empty to fail at bs 3", figures)
    return figures


MATRIX = ROOT / ".ci" / "padding_matrix.py"
MATRIX_TESTS = 'python -m pytest -q tests -k "test_matrix or extend"'  # the extend tests run the read sites


def matrix_task(run: Run) -> Path:
    """The bundled task on a copy of the target whose tests are the padding matrix (initcheck on)."""
    repo = run.work / "matrix-base"
    if not repo.exists():
        shutil.copytree(TARGET, repo, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        shutil.copy(MATRIX, repo / "tests" / "test_padding_matrix.py")
        git = ["git", "-c", "user.name=gpu", "-c", "user.email=gpu@localhost", "-c", "core.hooksPath=/dev/null"]
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base with the padding matrix"]):
            subprocess.run(git + args, cwd=repo, check=True)
    text = graded_task(run, "matrix", initcheck=True).read_text().replace(f'repo = "{TARGET}"', f'repo = "{repo}"')
    text = text.replace(f"command = {json.dumps(GRADED_TESTS)}", f"command = {json.dumps(MATRIX_TESTS)}")
    task = run.work / "matrix.toml"
    task.write_text(text)
    return task


def step_padding_matrix(run: Run) -> dict:
    """Every graph mode at three batch-size classes (captured, padded onto a larger graph, eager-only
    beyond the largest), through the graph runner and eagerly, for the all-empty change and the
    reference: the poisoned matrix, and `perfagent check` with initcheck on the matrix as its tests."""
    changes = {"reference": (reference_copy(run), REFERENCE),
               "all_empty": (target_copy(run, "all-empty", all_empty), diff_of(run, "matrix-all-empty", all_empty))}
    task = matrix_task(run)

    def one(name: str) -> dict:
        repo, patch = changes[name]
        shutil.copy(MATRIX, repo / "tests" / "test_padding_matrix.py")
        r = pytest_run(run, f"matrix-{name}-poisoned", repo, "-k", "test_matrix", poison=True)
        (repo / "tests" / "test_padding_matrix.py").unlink()
        ev = run.perfagent(f"check-matrix-{name}", ["check", str(task), "--patch", str(patch), "--no-perf"])
        failing = sorted(t.removeprefix("test_matrix") for t, k in r["outcomes"].items() if k in ("failure", "error"))
        return {"poisoned": {"passed": r["passed"], "failed": r["failure"] + r["error"],
                             "failing_modes": r["failing_modes"], "failing_cells": failing},
                "check": {"verdict": ev.get("verdict"), "reasons": [x[:300] for x in ev.get("reasons", [])]},
                "initcheck": initcheck_figures(ev)}

    with ThreadPoolExecutor(2) as pool:
        figures = dict(zip(changes, pool.map(one, changes)))
    ref, empty = figures["reference"], figures["all_empty"]
    problems = []
    if ref["poisoned"]["failed"] or ref["check"]["verdict"] != "pass" or ref["initcheck"]["reads"]:
        problems.append(f"the reference at some class: {ref['poisoned']['failing_cells'][:6]}, "
                        f"check {ref['check']['verdict']}, initcheck {ref['initcheck']['reads'][:3]}")
    if not ref["initcheck"]["measured"]:
        problems.append(f"initcheck did not measure the reference's matrix: {ref['initcheck']['note']}")
    if len(empty["poisoned"]["failing_modes"]) < 3 or empty["check"]["verdict"] != "fail":
        problems.append(f"all-empty failed in modes {empty['poisoned']['failing_modes']} (want 3 or more), "
                        f"check {empty['check']['verdict']} (want fail)")
    if not empty["initcheck"]["reads"]:
        problems.append(f"initcheck named no kernel for all-empty ({empty['initcheck']['note'] or 'none found'})")
    if problems:
        raise StepFailed("; ".join(problems), figures)
    return figures


STEPS = [("environment", step_environment), ("target_tests", step_target_tests), ("all_empty", step_all_empty),
         ("reference", step_reference), ("a_a", step_a_a), ("padded", step_padded),
         ("padding_matrix", step_padding_matrix), ("batch", step_batch)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="the same steps on the CPU, compute-sanitizer emulated")
    ap.add_argument("--budget", type=float, default=float(os.environ.get("GPU_BUDGET_S", 450)),
                    help="seconds: a step that would start later is skipped (default 450)")
    ap.add_argument("--full-batch", action="store_true", help="batch the whole task set, not two samples of one task")
    ap.add_argument("--steps", default=None, help="comma-separated subset of: " + ", ".join(n for n, _ in STEPS))
    args = ap.parse_args()
    out = Path(os.environ.get("OUT") or ROOT / "gpu-out").resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name in ("gpu.log", "summary.json", "evaluations.json"):
        (out / name).unlink(missing_ok=True)
    if args.dry_run:
        os.environ["PATH"] = f"{EMULATOR}{os.pathsep}{os.environ['PATH']}"
    own_locks = None if os.environ.get("PERFAGENT_LOCK_DIR") else tempfile.mkdtemp(prefix="perfagent-gpu-locks-")
    if own_locks:
        os.environ["PERFAGENT_LOCK_DIR"] = own_locks
    wanted = set(args.steps.split(",")) if args.steps else {n for n, _ in STEPS}
    started = time.monotonic()
    summary = {"dry_run": args.dry_run, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "budget_s": args.budget, "steps": {}}
    with tempfile.TemporaryDirectory(prefix="perfagent-gpu-") as tmp:
        run = Run(out=out, work=Path(tmp), dry=args.dry_run, deadline=started + args.budget,
                  full_batch=args.full_batch)
        for name, step in STEPS:
            if name not in wanted:
                continue
            record: dict = {"ok": False}
            if run.left_s <= 0:
                record.update(skipped=f"out of time ({args.budget:.0f}s budget)")
            else:
                t = time.monotonic()
                try:
                    record.update(ok=True, figures=step(run))
                except StepFailed as e:
                    record.update(error=str(e), figures=e.figures)
                except Exception as e:  # a broken step must not stop the others; its traceback goes to the log
                    record.update(error=f"{type(e).__name__}: {e}")
                    run.log(f"\n=== {name}: internal error\n{traceback.format_exc()}")
                record["seconds"] = round(time.monotonic() - t, 1)
            summary["steps"][name] = record
            summary["seconds"] = round(time.monotonic() - started, 1)
            write_json(out / "summary.json", summary)
            print(f"{name:14} {'ok' if record['ok'] else 'SKIPPED' if 'skipped' in record else 'FAILED'}"
                  f"  {record.get('seconds', 0):6.1f}s  {record.get('error') or record.get('skipped') or ''}"[:400],
                  flush=True)
    if own_locks:
        shutil.rmtree(own_locks, ignore_errors=True)
    ok = sum(r["ok"] for r in summary["steps"].values())
    print(f"{ok} passed, {len(summary['steps']) - ok} failed  ({summary.get('seconds', 0):.0f}s; {out}/summary.json)")
    return 0 if ok == len(summary["steps"]) else 1


if __name__ == "__main__":
    sys.exit(main())
