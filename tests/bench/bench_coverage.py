"""What recording "ran in full" (instruction positions and jumps on fine changed lines, agent.checks.arms) adds
to one full check: `python tests/bench/bench_coverage.py [TASK] [--patch FILE] [--runs 3]`.

Grades the task's reference patch (or --patch) `--runs` times on a fresh checker each, with the new
recording and without it (no fine lines handed to the hook: line recording as before), interleaved with one
plain run of the task's tests (bench_evidence.plain_tests, the figure a full check is held to). Prints one
JSON line per figure, medians over the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import agent.checks.coverage as coverage
from agent.checks import arms
from agent.task import load_task

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_evidence import ROOT, full, plain_tests  # noqa: E402  (the same full check, the same plain run)


def without_fine(root: Path, fl) -> arms.FileShape:
    return arms.FileShape()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task", nargs="?", default=str(ROOT / "tasks" / "cuda-graph-buffers.toml"))
    ap.add_argument("--patch", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("PERFAGENT_LOCK_DIR", tempfile.mkdtemp(prefix="bench-coverage-locks-"))
    task = load_task(Path(args.task))
    patch = (args.patch or task.reference_patch).read_text()
    real = coverage._shape
    withs, withouts, plains = [], [], []
    for i in range(args.runs):
        plains.append(plain_tests(task))
        for new in ((True, False) if i % 2 == 0 else (False, True)):  # each order in turn: no warm-up bias
            coverage._shape = real if new else without_fine
            try:
                wall, _, verdict, _ = full(task, patch, bench=True)
            finally:
                coverage._shape = real
            (withs if new else withouts).append(wall)
        wall = withs[-1]
        print(f"# verdict {verdict}: with {wall:.2f}s, without the new recording {withouts[-1]:.2f}s, "
              f"tests alone {plains[-1]:.2f}s", flush=True)
    med = statistics.median
    for metric, value, unit in (("full_check_s", med(withs), "s"),
                                ("full_check_without_new_recording_s", med(withouts), "s"),
                                ("plain_tests_s", med(plains), "s"),
                                ("full_check_over_plain_tests", med(withs) / med(plains), "x"),
                                ("without_new_recording_over_plain_tests", med(withouts) / med(plains), "x")):
        print(json.dumps({"metric": metric, "value": round(value, 3), "unit": unit}))


if __name__ == "__main__":
    main()
