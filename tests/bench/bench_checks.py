"""Cost of grading a patch: `python tests/bench/bench_checks.py [TASK] [--patch FILE] [--reference]`.

Runs one quick evaluation (what the agent's run_checks pays) and one full evaluation (the
final grading) of the task's reference patch, or of --patch, on a fresh checker each, and
prints JSON lines {"metric", "value", "unit"} with the wall time and what was measured.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from agent.checks import Checker
from agent.task import load_task

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("task", nargs="?", default=str(ROOT / "tasks/cuda-graph-buffers.toml"))
    ap.add_argument("--patch", default=None, help="default: the task's reference patch")
    ap.add_argument("--reference", action="store_true", help="also measure the reference in the full evaluation")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    task = load_task(args.task)
    patch = Path(args.patch or task.reference_patch).read_text()
    for quick in (True, False):
        with tempfile.TemporaryDirectory() as tmp, Checker(task, Path(tmp), log=print if args.verbose else None) as c:
            t = time.monotonic()
            ev = c.evaluate(patch, quick=quick, reference=args.reference and not quick)
            wall = time.monotonic() - t
        p = ev.perf
        print(json.dumps({
            "metric": f"check_{'quick' if quick else 'full'}_s", "value": round(wall, 1), "unit": "s", "task": task.id,
            "verdict": ev.verdict, "perf_verdict": p and p.verdict, "ratio": p and p.ratio, "ci": p and [p.ci_low, p.ci_high],
            "p_value": p and p.p_value, "pairs": p and p.n_pairs, "perf_s": p and p.duration_s,
            "lock_wait_s": p and p.lock_wait_s,
            "tests_s": ev.correctness and max(ev.correctness.plain.duration_s,
                                              ev.correctness.poison.duration_s if ev.correctness.poison else 0),
            "reference_speedup": ev.reference and ev.reference.speedup,
        }))


if __name__ == "__main__":
    main()
