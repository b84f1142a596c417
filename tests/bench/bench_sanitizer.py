"""What the uninitialised-read sanitizer costs: `python tests/bench/bench_sanitizer.py [--rounds N]`.

Grades each task's reference patch (tests only, no perf) with the sanitizer off and on, alternating,
and prints the poisoned run's wall time both ways (the sanitizer runs inside it), one JSON line per
grading and a summary line per task with the median slowdown. Cold processes (no warm interpreter),
so start-up is counted as a user's first check counts it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from agent.checks import Checker
from agent.task import load_task

ROOT = Path(__file__).resolve().parents[2]
TASKS = ["tasks/cuda-graph-buffers.toml", "tasks/real/sglang-fa-cuda-graph.toml"]


def poisoned_run_s(task, patch: str, sanitize: bool) -> tuple[float, int]:
    spec = task.spec.model_copy(update={"correctness": task.spec.correctness.model_copy(update={"sanitize": sanitize})})
    with tempfile.TemporaryDirectory() as tmp, Checker(task.model_copy(update={"spec": spec}), Path(tmp),
                                                       warm=False) as checker:
        ev = checker.evaluate(patch, perf=False)
    assert ev.correctness is not None and ev.correctness.poison is not None, ev.reasons
    reads = len(ev.sanitizer.reads) if ev.sanitizer is not None else 0
    return ev.correctness.poison.duration_s, reads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("tasks", nargs="*", default=TASKS)
    args = ap.parse_args()
    for name in args.tasks:
        task = load_task(ROOT / name)
        assert task.reference_patch is not None, f"{name} has no reference patch"
        patch = task.reference_patch.read_text()
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.rounds):
            for sanitize in (False, True):
                seconds, reads = poisoned_run_s(task, patch, sanitize)
                times[sanitize].append(seconds)
                print(json.dumps({"task": task.id, "sanitize": sanitize, "poisoned_run_s": seconds, "reads": reads}))
        off, on = statistics.median(times[False]), statistics.median(times[True])
        print(f"{task.id}: poisoned run {off:.1f}s without the sanitizer, {on:.1f}s with it "
              f"({on / off:.2f}x, medians of {args.rounds})")


if __name__ == "__main__":
    main()
