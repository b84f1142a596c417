"""The outside clock on identical code (A/A): `python tests/bench/bench_outside_clock.py [-n 40] [--task]`.

Each trial samples baseline against baseline as a full check does (agent.checks.perf.sample,
forked from one warm server, the FULL policy) and applies the confirmation rule
(agent.checks.confirm) whenever the metric claims any gain (S > 0), whatever the perf answer: a
"not confirmed" there is a false alarm, since the code is the same. Prints JSON lines
{"metric", "value", "unit"}: that false "not confirmed" rate, how many trials claimed a gain,
and what the outside figures cost: the median time the rule takes per trial, and the median
extra wall time of a cold bench process that accounts its CPU (agent.env.sandbox's reaper);
warm samples get their figures from the wait that reaps the child, for nothing.

The bench: a stdlib one (5 timed calls of a ~10 ms loop, metric the fastest), or with --task the
bundled task's (tasks/cuda-graph-buffers.toml, `calls` = its 20 repeats; needs torch).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from agent.checks import confirm
from agent.checks.evaluation import PerfResult
from agent.checks.perf import FULL, Bench, sample
from agent.env.sandbox import run_command
from agent.env.warm import WarmPython
from agent.task import PerfSpec

TINY = '''import json, time
def work():
    x = 0
    for i in range(150_000):
        x += i
    return x
times = []
for _ in range(5):
    t = time.perf_counter()
    work()
    times.append((time.perf_counter() - t) * 1000)
print(json.dumps({"metric": "loop_ms", "value": min(times), "unit": "ms"}))
'''
TARGET = Path(__file__).resolve().parents[2] / "target_repo"


def _sides(tmp: Path, task: bool) -> tuple[dict[str, Path], PerfSpec, int]:
    sides = {}
    for side in ("baseline", "candidate"):
        root = tmp / side / "repo"
        if task:
            shutil.copytree(TARGET, root, ignore=shutil.ignore_patterns(".git", "__pycache__"))
        else:
            root.mkdir(parents=True)
            (root / "bench.py").write_text(TINY)
        sides[side] = root
    if task:
        return sides, PerfSpec(command="python bench/bench_graph_init.py", metric="init_ms", timeout_s=300), 20
    return sides, PerfSpec(command="python bench.py", metric="loop_ms", timeout_s=60), 5


def _reaper_cost_ms(root: Path, n: int = 20) -> float:
    """Median extra wall time of a cold command that accounts its CPU time, paired with one that does not."""
    def once(account: bool) -> float:
        t = time.perf_counter()
        run_command("true", root, timeout_s=30, account_cpu=account)
        return time.perf_counter() - t

    return statistics.median(once(True) - once(False) for _ in range(n)) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=40, help="A/A trials")
    ap.add_argument("--task", action="store_true", help="the bundled task's bench instead of a stdlib one")
    args = ap.parse_args()
    if not WarmPython.available():
        raise SystemExit("warm servers need bubblewrap")
    claimed = alarms = point_alarms = faster = 0
    rule_s: list[float] = []
    pairs: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("PERFAGENT_LOCK_DIR", str(Path(tmp) / "locks"))
        sides, spec, calls = _sides(Path(tmp), args.task)
        bench = Bench(spec, sides, Path(tmp) / "scratch")
        try:
            for trial in range(args.n):
                s = sample(sides, spec, FULL, seed=trial, bench=bench)
                c = s.comparison
                assert c is not None
                pairs.append(c.n_candidate)
                faster += c.verdict == "faster"
                p = PerfResult(metric=spec.metric, direction=spec.direction, unit=s.unit, ratio=c.ratio,
                               ci_low=c.ci_low, ci_high=c.ci_high, baseline_median=c.baseline_median,
                               candidate_median=c.candidate_median,
                               verdict="faster")  # the rule as if the metric's answer were "faster"
                t = time.perf_counter()
                o = confirm.judge(p, confirm.figures(s.wall, s.cpu), calls=calls, max_speedup=10)
                rule_s.append(time.perf_counter() - t)
                if o.claimed_s is not None and o.claimed_s > 0:
                    claimed += 1
                    alarms += o.confirmed is False
                    # the same rule held to the claim's point estimate rather than its interval's bound
                    point = confirm.judge(p.model_copy(update={"ci_low": None, "ci_high": None}),
                                          confirm.figures(s.wall, s.cpu), calls=calls, max_speedup=10)
                    point_alarms += point.confirmed is False
        finally:
            mode = bench.mode
            bench.close()
        reaper_ms = _reaper_cost_ms(Path(tmp) / "baseline" / "repo")
    for metric, value, unit in (
            ("trials", args.n, "count"), ("median_pairs", statistics.median(pairs), "count"),
            ("trials_claiming_a_gain", claimed, "count"), ("false_not_confirmed", alarms, "count"),
            ("false_not_confirmed_rate", round(alarms / claimed, 3) if claimed else 0.0, "fraction"),
            ("false_not_confirmed_rate_point_claim", round(point_alarms / claimed, 3) if claimed else 0.0,
             "fraction"),
            ("aa_faster_answers", faster, "count"),
            ("rule_median_ms", round(statistics.median(rule_s) * 1000, 3), "ms"),
            ("cold_reaper_cost_ms", round(reaper_ms, 1), "ms")):
        print(json.dumps({"metric": metric, "value": value, "unit": unit}))
    print(json.dumps({"metric": "samples", "value": mode, "unit": ""}))


if __name__ == "__main__":
    main()
