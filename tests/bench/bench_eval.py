"""Where one grading's time goes: `python tests/bench/bench_eval.py [TASK] [--patch FILE] [--cold]`.

Grades the task's reference patch (or --patch) on a fresh checker each: a full evaluation with
the reference measured alongside (the final grading), the same again on a checker that has
graded once (its test interpreters started), a quick one (the agent's run_checks), and an empty
diff (must be "no-change" at once). Prints one JSON line per grading,
{"metric", "value", "unit"} plus the time of each phase, then a table. `--cold` starts every
process afresh (no warm interpreter: every test run and bench sample a fresh process).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from agent.checks import Checker, Evaluation
from agent.task import load_task

ROOT = Path(__file__).resolve().parents[2]


def phases(ev: Evaluation, wall: float) -> dict[str, float]:
    """Wall seconds per phase; "workspaces" is what is left: checkouts, integrity, coverage, start-up."""
    c, p = ev.correctness, ev.perf
    tests = max(c.plain.duration_s, c.poison.duration_s if c.poison else 0) if c else 0.0
    perf = p.duration_s or 0.0 if p else 0.0
    lock = p.lock_wait_s or 0.0 if p else 0.0
    return {"tests": round(tests, 2), "perf": round(perf, 2), "lock_wait": round(lock, 2),
            "workspaces": round(max(0.0, wall - tests - perf - lock), 2)}


def grade(task, patch: str, *, quick: bool, reference: bool, warm: bool, again: bool = False) -> dict:
    """One grading on a fresh checker; `again`: the second of two on one checker (its test
    interpreters already started, as for every check of an agent's run after its first)."""
    with tempfile.TemporaryDirectory() as tmp, Checker(task, Path(tmp), lock_dir=Path(tmp) / "locks", warm=warm) as c:
        if again:
            c.evaluate(patch, quick=quick, reference=reference)
        t = time.monotonic()
        ev = c.evaluate(patch, quick=quick, reference=reference)
        wall = time.monotonic() - t
    p = ev.perf
    name = "no_change" if not patch.strip() else ("quick" if quick else "full") + ("_again" if again else "")
    return {"metric": f"eval_{name}_s", "value": round(wall, 2), "unit": "s", "verdict": ev.verdict,
            "perf_verdict": p and p.verdict, "pairs": p and p.n_pairs, "speedup": ev.speedup,
            "reference_speedup": ev.reference and ev.reference.speedup, "processes": p and p.processes,
            **phases(ev, wall)}


def quick_only(task, patch: str, n: int, *, warm: bool) -> None:
    """The quick check's seconds, the first and each later one on one checker (as an agent's run pays them)."""
    with tempfile.TemporaryDirectory() as tmp, Checker(task, Path(tmp), lock_dir=Path(tmp) / "locks", warm=warm) as c:
        for i in range(n):
            t = time.monotonic()
            ev = c.evaluate(patch, quick=True)
            wall = time.monotonic() - t
            b = ev.bench_check
            print(json.dumps({"metric": "eval_quick_s" if i == 0 else "eval_quick_again_s", "value": round(wall, 2),
                              "unit": "s", "verdict": ev.verdict, "perf_verdict": ev.perf and ev.perf.verdict,
                              "bench_lines": b and len(b.ran), **phases(ev, wall)}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("task", nargs="?", default=str(ROOT / "tasks/cuda-graph-buffers.toml"))
    ap.add_argument("--patch", default=None, help="default: the task's reference patch")
    ap.add_argument("--cold", action="store_true", help="a fresh interpreter for every process")
    ap.add_argument("--quick-only", type=int, default=0, metavar="N",
                    help="only the quick check (the agent's check tool), N times on one warm checker")
    args = ap.parse_args()
    task = load_task(args.task)
    patch = Path(args.patch or task.reference_patch).read_text()
    if args.quick_only:
        quick_only(task, patch, args.quick_only, warm=not args.cold)
        return
    rows = [grade(task, patch, quick=False, reference=True, warm=not args.cold),
            grade(task, patch, quick=False, reference=True, warm=not args.cold, again=True),
            grade(task, patch, quick=True, reference=False, warm=not args.cold),
            grade(task, "", quick=False, reference=True, warm=not args.cold)]
    for r in rows:
        print(json.dumps(r))
    print(f"\n{task.id} on {os.cpu_count()} cores; bench samples: {rows[0]['processes']}")
    print(f"{'grading':<14}{'wall s':>8}{'tests':>8}{'perf':>8}{'lock':>8}{'other':>8}  pairs  verdict")
    for r in rows:
        print(f"{r['metric'][5:-2]:<14}{r['value']:>8}{r['tests']:>8}{r['perf']:>8}{r['lock_wait']:>8}"
              f"{r['workspaces']:>8}  {r['pairs'] or '-':>5}  {r['verdict']} {r['perf_verdict'] or ''}")


if __name__ == "__main__":
    main()
