"""What the bench run under the sanitizer and the harness's clock add to one full evaluation:
`python tests/bench/bench_evidence.py [TASK] [--patch FILE] [--runs 5]`.

Grades the task's reference patch (or --patch) `--runs` times on a fresh checker each: with the bench's
run under the instruments, without it, and without it nor the sampling the clock's confirmation adds
(FULL.confirm off; the clock's figures themselves come from the wait that reaps each sample, for
nothing), interleaved; and times one plain run of the task's tests
in the same session (a fresh process, its own interpreter, no sandbox), the figure a full check is
held to. Prints one JSON line per figure ({"metric", "value", "unit"}), medians over the runs, and where the
full check's time goes: the tests phase (everything before the sampling: the plain, poisoned and bench's
runs side by side), each of those runs' own seconds, and the sampling (the first-call round included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import agent.checks.collect as collect
from agent.checks import Checker
from agent.checks.perf import FULL
from agent.env.workspace import Workspace
from agent.task import load_task

ROOT = Path(__file__).resolve().parents[2]


def full(task, patch: str, bench: bool, confirm: bool = True) -> tuple[float, float | None, str, dict[str, float]]:
    """One full evaluation's wall seconds, its bench run's own seconds, the verdict, and its phases."""
    real = collect._correctness

    def without(*args, **kwargs):
        return real(*args, **{**kwargs, "bench": False})

    collect._correctness = real if bench else without
    policy = FULL if confirm else replace(FULL, confirm=False)
    try:
        with tempfile.TemporaryDirectory() as tmp, \
                Checker(task, Path(tmp), lock_dir=Path(tmp) / "locks", full=policy) as c:
            t = time.monotonic()
            ev = c.evaluate(patch)
            wall = time.monotonic() - t
    finally:
        collect._correctness = real
    b = ev.bench_check
    return wall, (b.run.duration_s if b is not None else None), ev.verdict, phases(ev, wall)


def phases(ev, wall: float) -> dict[str, float]:
    """Where one full check's `wall` seconds went, from its evaluation."""
    perf, c = ev.perf, ev.correctness
    sampling = (perf.duration_s + perf.lock_wait_s) if perf is not None else 0.0
    out = {"tests_phase_s": wall - sampling, "sampling_s": sampling,
           "sampling_pairs": float(perf.n_pairs) if perf is not None else 0.0,
           "first_call_pairs": float(len(perf.first_call.candidate_samples))
           if perf is not None and perf.first_call is not None else 0.0}
    for name, run in (("plain_run_s", c.plain if c else None), ("poisoned_run_s", c.poison if c else None)):
        if run is not None:
            out[name] = run.duration_s
    return out


def plain_tests(task) -> float:
    """The task's tests once, as a user would run them in a checkout (with the task's interpreter)."""
    with tempfile.TemporaryDirectory() as tmp, Checker(task, Path(tmp) / "work") as c:
        bin_dir = c.sides.interpreter().bin_dir
        ws = Workspace.create(task.repo, task.spec.base, Path(tmp) / "plain")
        env = {**os.environ, "PYTHONPATH": str(ws.root),
               "PATH": f"{bin_dir or Path(sys.executable).parent}:{os.environ['PATH']}"}
        t = time.monotonic()
        res = subprocess.run(task.spec.correctness.command, shell=True, cwd=ws.root, env=env, capture_output=True)
        took = time.monotonic() - t
        if res.returncode != 0:
            raise SystemExit(f"the plain test run failed: {res.stdout[-500:]!r} {res.stderr[-500:]!r}")
        return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task", nargs="?", default=str(ROOT / "tasks" / "cuda-graph-buffers.toml"))
    ap.add_argument("--patch", type=Path)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    os.environ.setdefault("PERFAGENT_LOCK_DIR", tempfile.mkdtemp(prefix="bench-evidence-locks-"))
    task = load_task(Path(args.task))
    patch = (args.patch or task.reference_patch).read_text()
    withs, withouts, bares, runs, plains, parts = [], [], [], [], [], []
    for _ in range(args.runs):
        plains.append(plain_tests(task))
        wall, run, verdict, part = full(task, patch, bench=True)
        withs.append(wall)
        runs.append(run or 0.0)
        parts.append(part)
        withouts.append(full(task, patch, bench=False)[0])
        bares.append(full(task, patch, bench=False, confirm=False)[0])
        print(f"# verdict {verdict}: with {wall:.2f}s, without {withouts[-1]:.2f}s, nor the clock's sampling "
              f"{bares[-1]:.2f}s, bench run {run}s, tests alone {plains[-1]:.2f}s", flush=True)
    med = statistics.median
    for metric, value, unit in (("full_eval_with_bench_check_s", med(withs), "s"),
                                ("full_eval_without_bench_check_s", med(withouts), "s"),
                                ("bench_check_adds_s", med(w - o for w, o in zip(withs, withouts)), "s"),
                                ("bench_check_run_s", med(runs), "s"),
                                ("clock_sampling_adds_s", med(w - b for w, b in zip(withouts, bares)), "s"),
                                ("plain_tests_s", med(plains), "s"),
                                ("full_eval_over_plain_tests", med(withs) / med(plains), "x"),
                                *((f"full_eval_{k}", med(p.get(k, 0.0) for p in parts),
                                   "pairs" if "pairs" in k else "s") for k in parts[0])):
        print(json.dumps({"metric": metric, "value": round(value, 3), "unit": unit}))


if __name__ == "__main__":
    main()
