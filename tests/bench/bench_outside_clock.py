"""The outside clock's cost to honest work: `python tests/bench/bench_outside_clock.py [-n 20] [--task] [--load N]`.

Each trial samples a candidate against the baseline as a full check does (agent.checks.perf.sample,
forked from one warm server, the FULL policy, which samples on while the clocks have not answered a
"faster") and judges the answer as grade does (agent.checks.confirm): "faster" only where a clock
could have refuted the claimed saving and did not. Three candidates: the same code (A/A), and
honest gains of 5% and 10% (the loop cut by that much), and the same code printing its metric x1/3 or
x0.6 (a forged 3x or 1.7x line). Prints JSON lines {"metric", "value", "unit"} per candidate: the share
of trials ending "faster" (for A/A or a forged line a false gain; else the power),
"not confirmed" as refuted (every clock rules the claim out: a fail) and as not established (no
clock could tell: the machine's noise), the median pairs; and the rule's median cost per trial.

The bench: a stdlib one (5 timed calls of a ~10 ms loop, metric the fastest), or with --task the
bundled task's (tasks/cuda-graph-buffers.toml, `calls` = its 20 repeats; needs torch; A/A only).
`--load N` runs N busy processes beside it, as other work on the machine would.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

from agent.checks import confirm
from agent.checks.evaluation import PerfResult
from agent.checks.perf import FULL, Bench, sample
from agent.env.sandbox import run_command
from agent.env.warm import WarmPython
from agent.task import PerfSpec

TINY = '''import json, time
def work():
    x = 0.0
    for i in range(ITERS):
        x += i
    return x
times = []
for _ in range(5):
    t = time.perf_counter()
    work()
    times.append((time.perf_counter() - t) * 1000)
print(json.dumps({"metric": "loop_ms", "value": min(times) * SCALE, "unit": "ms"}))
'''
# name -> (the share of the loop the candidate cuts, the factor its metric line is forged by)
CANDIDATES = {"aa": (0.0, 1.0), "gain5": (0.05, 1.0), "gain10": (0.10, 1.0), "forged3x": (0.0, 1 / 3),
              "forged1.7x": (0.0, 0.6)}
TARGET = Path(__file__).resolve().parents[2] / "target_repo"


def _sides(tmp: Path, task: bool, gain: float, forged: float = 1.0) -> tuple[dict[str, Path], PerfSpec, int]:
    sides = {}
    for side in ("baseline", "candidate"):
        root = tmp / side / "repo"
        if task:
            shutil.copytree(TARGET, root, ignore=shutil.ignore_patterns(".git", "__pycache__"))
        else:
            root.mkdir(parents=True)
            iters = 150_000 if side == "baseline" else round(150_000 * (1 - gain))
            scale = forged if side == "candidate" else 1.0
            (root / "bench.py").write_text(TINY.replace("ITERS", str(iters)).replace("SCALE", repr(scale)))
        sides[side] = root
    if task:
        return sides, PerfSpec(command="python bench/bench_graph_init.py", metric="init_ms", timeout_s=300,
                               calls=20), 20
    return sides, PerfSpec(command="python bench.py", metric="loop_ms", timeout_s=60, calls=5), 5


def _reaper_cost_ms(root: Path, n: int = 20) -> float:
    """Median extra wall time of a cold command that accounts its CPU time, paired with one that does not."""
    def once(account: bool) -> float:
        t = time.perf_counter()
        run_command("true", root, timeout_s=30, account_cpu=account)
        return time.perf_counter() - t

    return statistics.median(once(True) - once(False) for _ in range(n)) * 1000


def _busy() -> None:
    while True:
        pass


def trials(tmp: Path, args: argparse.Namespace, gain: float, forged: float) -> dict[str, float]:
    """`args.n` full samplings of one candidate, each judged as grade judges it."""
    ends: Counter[str] = Counter()
    rule_s: list[float] = []
    pairs: list[int] = []
    sides, spec, calls = _sides(tmp, args.task, gain, forged)
    bench = Bench(spec, sides, tmp / "scratch")
    try:
        for trial in range(args.n):
            s = sample(sides, spec, FULL, seed=trial, bench=bench)
            c = s.comparison
            assert c is not None
            pairs.append(c.n_candidate)
            p = PerfResult(metric=spec.metric, direction=spec.direction, unit=s.unit, ratio=c.ratio,
                           ci_low=c.ci_low, ci_high=c.ci_high, baseline_median=c.baseline_median,
                           candidate_median=c.candidate_median, verdict=c.verdict)
            t = time.perf_counter()
            o = confirm.judge(p, confirm.figures(s.wall, s.cpu), calls=calls, max_speedup=10)
            rule_s.append(time.perf_counter() - t)
            ends[str(c.verdict) if o.confirmed is not False else "refuted" if o.refuted else "not established"] += 1
    finally:
        bench.close()
    return {"faster": ends["faster"] / args.n, "refuted": ends["refuted"] / args.n,
            "not_established": ends["not established"] / args.n, "median_pairs": statistics.median(pairs),
            "rule_median_ms": round(statistics.median(rule_s) * 1000, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=20, help="trials per candidate")
    ap.add_argument("--task", action="store_true", help="the bundled task's bench instead of a stdlib one")
    ap.add_argument("--load", type=int, default=0, help="busy processes beside the bench")
    ap.add_argument("--only", nargs="+", choices=list(CANDIDATES), help="these candidates only")
    args = ap.parse_args()
    if not WarmPython.available():
        raise SystemExit("warm servers need bubblewrap")
    load = [multiprocessing.Process(target=_busy, daemon=True) for _ in range(args.load)]
    for proc in load:
        proc.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            os.environ.setdefault("PERFAGENT_LOCK_DIR", str(Path(tmp) / "locks"))
            names = args.only or (["aa"] if args.task else list(CANDIDATES))
            for name in names:
                for metric, value in trials(Path(tmp) / name, args, *CANDIDATES[name]).items():
                    print(json.dumps({"metric": f"{name}_{metric}", "value": value, "load": args.load,
                                      "loadavg_1m": round(os.getloadavg()[0], 1)}), flush=True)
            reaper_ms = _reaper_cost_ms(Path(tmp) / names[0] / "baseline" / "repo")
    finally:
        for proc in load:
            proc.terminate()
    print(json.dumps({"metric": "cold_reaper_cost_ms", "value": round(reaper_ms, 1), "unit": "ms"}))


if __name__ == "__main__":
    main()
