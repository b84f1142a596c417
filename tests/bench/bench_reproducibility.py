"""How often one run's figure falls inside another run's interval: `python tests/bench/bench_reproducibility.py
[-n 8] [--load N] [--task] [--gain G] [--servers S]`.

One patch (a stdlib bench whose loop the candidate cuts by `--gain`, or with --task the bundled task's
bench, A/A), measured in N independent runs as a full check measures it (agent.checks.perf.sample, the
FULL policy, each run its own freshly started warm server), each with the machine's conditions
(agent.checks.conditions). For every ordered pair of runs (i, j), i != j: does run j's ratio fall inside
run i's 95% interval? Both figures move, so even an interval right about its own run's noise holds the
other's only ~83% of the time; one that misses how the figure moves between runs holds fewer.

The rerun interval: each plain run's interval as the check reports it for another run's figure
(agent.checks.stats.rerun_interval: widened for the other run's own noise and for few pairs), at no
extra sampling. The block interval (`--servers S`, default 3): each run is S blocks, each sampled from its own
separately started server with a fixed number of pairs, and its interval is the block bootstrap over
them (agent.checks.stats.block_ci), so the spread between servers is inside it.

Phases: idle (nothing added), then loaded (`--load N` busy processes beside it; 0: idle only). Prints
JSON lines {"metric", "value", "unit"}: per phase and interval, the agreement rate, the median interval
width, and the share of runs the conditions call busy.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import statistics
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_outside_clock import _busy, _sides  # noqa: E402  (the same benches, the same load)

from agent.checks.conditions import Conditions, busy  # noqa: E402
from agent.checks.perf import FULL, Bench, SamplingPolicy, sample  # noqa: E402
from agent.checks.stats import block_ci, rerun_interval  # noqa: E402
from agent.env.warm import WarmPython  # noqa: E402


@dataclass
class Run:
    ratio: float
    low: float
    high: float
    conditions: list[Conditions]
    pairs: int = 0
    cv: float | None = None


def plain_run(sides: dict[str, Path], spec, seed: int, scratch: Path) -> Run:
    """One full sampling from its own server, its interval as the check reports it."""
    bench = Bench(spec, sides, scratch)
    try:
        s = sample(sides, spec, FULL, seed=seed, bench=bench)
    finally:
        bench.close()
    c = s.comparison
    assert c is not None
    return Run(c.ratio, c.ci_low, c.ci_high, [s.conditions] if s.conditions else [], len(s.values["candidate"]), c.cv)


def block_run(sides: dict[str, Path], spec, seed: int, scratch: Path, servers: int, pairs: int) -> Run:
    """S blocks of `pairs` pairs, each from a separately started server; the block bootstrap's interval."""
    policy = SamplingPolicy(min_pairs=pairs, max_pairs=pairs)
    blocks, conds = [], []
    for k in range(servers):
        bench = Bench(spec, sides, scratch / f"s{k}")
        try:
            s = sample(sides, spec, policy, seed=seed * 100 + k, bench=bench)
        finally:
            bench.close()
        blocks.append((s.values["baseline"], s.values["candidate"]))
        conds += [s.conditions] if s.conditions else []
    ratio, low, high = block_ci(blocks, seed=seed, n_resamples=2000)
    return Run(ratio, low, high, conds)


def agreement(runs: list[Run]) -> float:
    """Over ordered pairs (i, j), i != j: the share where run j's ratio lies in run i's interval."""
    pairs = list(itertools.permutations(runs, 2))
    return sum(a.low <= b.ratio <= a.high for a, b in pairs) / len(pairs) if pairs else float("nan")


def report(phase: str, kind: str, runs: list[Run]) -> None:
    busy_share = statistics.mean(any(busy(c) for c in r.conditions) for r in runs)
    others = [c.others_share for r in runs for c in r.conditions if c.others_share is not None]
    for metric, value, unit in (
            (f"{phase}_{kind}_agreement", round(agreement(runs), 3), "share"),
            (f"{phase}_{kind}_median_width", round(statistics.median(r.high - r.low for r in runs), 4), "ratio"),
            (f"{phase}_{kind}_busy_runs", round(busy_share, 3), "share"),
            (f"{phase}_{kind}_others_cpu", round(statistics.median(others), 3) if others else None, "share")):
        print(json.dumps({"metric": metric, "value": value, "unit": unit}), flush=True)
    for r in runs:
        print(json.dumps({"phase": phase, "interval": kind, "ratio": round(r.ratio, 4), "low": round(r.low, 4),
                          "high": round(r.high, 4), "pairs": r.pairs, "cv": r.cv,
                          "busy": any(busy(c) for c in r.conditions),
                          "others": [c.others_share for c in r.conditions]}), file=sys.stderr, flush=True)


def phase(name: str, args: argparse.Namespace, tmp: Path) -> None:
    sides, spec, _ = _sides(tmp / name, args.task, args.gain)
    plain = [plain_run(sides, spec, i, tmp / name / f"p{i}") for i in range(args.n)]
    report(name, "plain", plain)
    report(name, "rerun", [replace(r, low=lo, high=hi) for r in plain
                           for lo, hi in [rerun_interval(r.ratio, r.low, r.high, r.pairs)]])
    if args.servers > 1:
        blocks = [block_run(sides, spec, i, tmp / name / f"b{i}", args.servers, args.pairs) for i in range(args.n)]
        report(name, f"blocks{args.servers}", blocks)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=8, help="independent runs per phase")
    ap.add_argument("--task", action="store_true", help="the bundled task's bench (A/A) instead of a stdlib one")
    ap.add_argument("--gain", type=float, default=0.10, help="the stdlib candidate's cut of the loop")
    ap.add_argument("--load", type=int, default=2, help="busy processes in the loaded phase (0: idle only)")
    ap.add_argument("--servers", type=int, default=3, help="blocks per run for the widened interval (1: none)")
    ap.add_argument("--pairs", type=int, default=7, help="pairs per block")
    args = ap.parse_args()
    if not WarmPython.available():
        raise SystemExit("warm servers need bubblewrap")
    with tempfile.TemporaryDirectory() as tmp:
        phase("idle", args, Path(tmp))
        if args.load:
            load = [multiprocessing.Process(target=_busy, daemon=True) for _ in range(args.load)]
            for proc in load:
                proc.start()
            try:
                phase("loaded", args, Path(tmp))
            finally:
                for proc in load:
                    proc.terminate()


if __name__ == "__main__":
    main()
