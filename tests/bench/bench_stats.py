"""Honesty of the perf verdicts on real processes: `python tests/bench/bench_stats.py [--trials N] [--load [N]]`.

Records one long interleaved stream of real bench processes (a busy-wait like the fixture's
bench, no torch), each started as the checker starts them (agent.checks.perf.Bench: a child of
one warm server per trial shared by every side, or with `--cold` a fresh process in its own
sandbox; from folders whose paths are as long as every other side's), for four sides in every
round, in shuffled order: the
baseline, an identical copy (A/A), and candidates whose measured loop does 1/1.05 and 1/1.10
of the iterations (true speedups of 5% and 10%). The stream is cut into consecutive,
non-overlapping chunks of 23 rounds, each an independent trial, and on the same chunk we apply
  - ours: one warm-up round, then the sequential paired procedure of a full evaluation
    (agent.checks.stats.sequential with perf.FULL: 5..20 pairs, overall A/A error 5%);
  - GSO's rule: mean of the first 5 processes per side, speedup >= 1.2 counts as faster;
  - SWE-Perf's: 3 warm-ups + 20 runs per side, IQR outlier filter, one-sided Mann-Whitney p < 0.1.
Prints JSON lines {"metric", "value", ...} (rates with 95% Wilson intervals, noise figures) and a
table. `--load N` runs N busy processes alongside (a competing CPU load; default 2 = the cores).
`--task` measures the bundled task's own bench (init_ms, ~0.4 s a forked sample) instead of the spin,
with the effect a busy-wait of 5% / 10% of the baseline's time at the top of the measured function.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agent.checks.perf import FULL, Bench, RoundLost, parse_metric, perf_env  # noqa: E402
from agent.checks.stats import sequential  # noqa: E402
from agent.env.sandbox import run_command  # noqa: E402
from agent.task import PerfSpec  # noqa: E402

ITERS = 40_000
SIDES = {"baseline": 1.0, "aa": 1.0, "faster5": 1.05, "faster10": 1.10}  # true speedup of each side
CHUNK = 23  # rounds per trial: SWE-Perf's 3 warm-ups + 20 runs; ours uses 1 warm-up + up to 20 pairs
BENCH = '''import json
import time

from work import spin

times = []
for _ in range(25):
    t = time.perf_counter()
    spin()
    times.append((time.perf_counter() - t) * 1000)
print(json.dumps({"metric": "spin_ms", "value": min(times), "unit": "ms"}))
'''
WORK = '''ITERS = {iters}


def spin():
    x = 0.0
    for i in range(ITERS):
        x += i
    return x
'''


def make_sides(tmp: Path) -> dict[str, Path]:
    out = {}
    for i, (side, s) in enumerate(SIDES.items()):
        d = tmp / f"side-{i}" / "repo"
        d.mkdir(parents=True)
        (d / "bench.py").write_text(BENCH)
        (d / "work.py").write_text(WORK.format(iters=round(ITERS / s)))
        out[side] = d
    return out


# --task: the bundled task's own bench, with a busy-wait of a set share of the baseline's time
# added at the top of the measured function (the effect is then a slowdown of the copy, i.e. a
# speedup of the baseline over it; the rules below see the faster side as the "candidate").
TASK_BENCH, TASK_METRIC = "python bench/bench_graph_init.py", "init_ms"
TASK_FILE, TASK_DEF = ("miniattn/flashattention_backend.py",
                       "    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int) -> None:\n")


def make_task_sides(tmp: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for i, side in enumerate(SIDES):
        d = tmp / f"side-{i}" / "repo"
        shutil.copytree(ROOT / "target_repo", d, ignore=shutil.ignore_patterns("__pycache__"))
        out[side] = d
    base_ms = float(np.median([run_one(out["baseline"]) for _ in range(5)]))
    for side, s in SIDES.items():
        if s != 1.0:  # the copy takes s times the baseline's time
            f = out[side] / TASK_FILE
            wait = f"        _end = __import__('time').perf_counter() + {(s - 1) * base_ms / 1000!r}\n" \
                   "        while __import__('time').perf_counter() < _end:\n            pass\n"
            f.write_text(f.read_text().replace(TASK_DEF, TASK_DEF + wait, 1))
    return out


def spec_for(d: Path) -> PerfSpec:
    if (d / TASK_FILE).exists():
        return PerfSpec(command=TASK_BENCH, metric=TASK_METRIC, timeout_s=120)
    return PerfSpec(command="python bench.py", metric="spin_ms", timeout_s=120)


def run_one(d: Path) -> float:
    spec = spec_for(d)
    res = run_command(spec.command, d, timeout_s=120, env=perf_env(d))
    assert res.ok, res.output
    return parse_metric(res.output, spec.metric)[0]


def record(sides: dict[str, Path], trials: int, seed: int, warm: bool, scratch: Path, log) -> dict[str, list[float]]:
    """`trials` chunks of CHUNK rounds, each measured as one evaluation is: its own Bench."""
    rng = random.Random(seed)
    values: dict[str, list[float]] = {s: [] for s in sides}
    spec = spec_for(next(iter(sides.values())))
    t0 = time.monotonic()
    for t in range(trials):
        bench = Bench(spec, sides, scratch, warm=warm)
        try:
            for _ in range(CHUNK):
                order = list(sides)
                rng.shuffle(order)
                while True:
                    try:
                        got = {s: bench(s, sides[s], spec)[0] for s in order}
                        break
                    except RoundLost as e:
                        log(f"round lost: {e}")
                for s in order:
                    values[s].append(got[s])
        finally:
            bench.close()
        log(f"trial {t + 1}/{trials} recorded ({time.monotonic() - t0:.0f}s, {bench.mode})")
    return values


# -- the three rules on one chunk -----------------------------------------------------------------
def ours(b: list[float], c: list[float], min_effect: float, seed: int) -> tuple[str, int, str]:
    r = sequential(b[1:21], c[1:21], FULL.min_pairs, FULL.max_pairs, "lower", min_effect, seed, looks=FULL.looks)
    return r.verdict, r.n_candidate, r.stop_reason or ""


def gso(b: list[float], c: list[float]) -> str:
    """GSO: mean of 5 fresh processes per side; a speedup of at least 1.2 counts as faster."""
    return "faster" if np.mean(b[:5]) / np.mean(c[:5]) >= 1.2 else "not faster"


def _iqr_filter(x: list[float]) -> np.ndarray:
    a = np.asarray(x, float)
    q1, q3 = np.percentile(a, [25, 75])
    return a[(a >= q1 - 1.5 * (q3 - q1)) & (a <= q3 + 1.5 * (q3 - q1))]


def swe_perf(b: list[float], c: list[float]) -> str:
    """SWE-Perf: 3 warm-ups, 20 runs, IQR outlier filter, one-sided Mann-Whitney p < 0.1."""
    from scipy import stats as sps

    p = sps.mannwhitneyu(_iqr_filter(c[3:23]), _iqr_filter(b[3:23]), alternative="less").pvalue
    return "faster" if p < 0.1 else "not faster"


def wilson(k: int, n: int) -> list[float]:
    from scipy import stats as sps

    if n == 0:
        return [0.0, 1.0]
    ci = sps.binomtest(k, n).proportion_ci(0.95, method="wilson")
    return [round(float(ci.low), 4), round(float(ci.high), 4)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=30, help="independent trials (chunks of %d rounds)" % CHUNK)
    ap.add_argument("--load", type=int, nargs="?", const=2, default=0, help="N busy processes alongside")
    ap.add_argument("--min-effect", type=float, default=0.03)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--task", action="store_true",
                    help="the bundled task's bench (init_ms) with a busy-wait in init_cuda_graph_state, not the spin")
    ap.add_argument("--save", default=None, help="write the recorded samples to this JSON file")
    ap.add_argument("--cold", action="store_true", help="every sample a fresh process (no warm server)")
    args = ap.parse_args()
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sides = (make_task_sides if args.task else make_sides)(Path(tmp))
            for d in sides.values():
                run_one(d)  # page cache
            t0 = time.monotonic()
            values = record(sides, args.trials, args.seed, not args.cold, Path(tmp) / "bench", log)
            wall = time.monotonic() - t0
    finally:
        for p in burners:
            p.kill()
            p.wait()
    if args.save:
        Path(args.save).write_text(json.dumps(values))
    mode = "cold" if args.cold else "warm"
    emit = lambda **kw: print(json.dumps({**kw, "load": args.load, "trials": args.trials, "processes": mode}))  # noqa: E731

    # noise figures: per-side CV, and the std of the per-round log ratios (what the paired test sees)
    b = np.asarray(values["baseline"])
    emit(metric="record_s", value=round(wall, 1), unit="s", processes=sum(len(v) for v in values.values()))
    for s, v in values.items():
        v = np.asarray(v)
        emit(metric=f"cv_{s}", value=round(float(np.std(v, ddof=1) / np.mean(v)), 4),
             median_ms=round(float(np.median(v)), 3), min_ms=round(float(v.min()), 3), max_ms=round(float(v.max()), 3))
    emit(metric="cv_paired_log_ratio_aa", value=round(float(np.std(np.log(values["aa"]) - np.log(b), ddof=1)), 4))

    rows = []
    for side, truth in (("aa", "A/A"), ("faster5", "5%"), ("faster10", "10%")):
        res: dict[str, list[str]] = {"ours": [], "GSO": [], "SWE-Perf": []}
        pairs, reasons = [], Counter()
        for t in range(args.trials):
            sl = slice(t * CHUNK, (t + 1) * CHUNK)
            bb, cc = values["baseline"][sl], values[side][sl]
            if args.task:  # there the copy is the slow one: the baseline is the faster "candidate"
                bb, cc = cc, bb
            v, n, why = ours(bb, cc, args.min_effect, args.seed + t)
            res["ours"].append(v)
            pairs.append(n)
            reasons[why.split(" after")[0].split(" (")[0]] += 1
            res["GSO"].append(gso(bb, cc))
            res["SWE-Perf"].append(swe_perf(bb, cc))
        for rule, verdicts in res.items():
            counts = Counter(verdicts)
            if side == "aa":  # a false call: "faster" (or, for ours, "slower") on identical code
                k = counts["faster"] + counts["slower"]
                metric = "aa_false_rate"
            else:
                k = counts["faster"]
                metric = f"detect_{side[6:]}pct_rate"
            rate = k / args.trials
            extra = {"mean_pairs": round(float(np.mean(pairs)), 1), "stop": dict(reasons)} if rule == "ours" else {}
            emit(metric=metric, rule=rule, value=round(rate, 4), ci95=wilson(k, args.trials),
                 verdicts=dict(counts), **extra)
            rows.append((truth, rule, rate, wilson(k, args.trials), dict(counts),
                         f"{np.mean(pairs):.1f}" if rule == "ours" else ("5" if rule == "GSO" else "20+3")))

    print(f"\n{args.trials} trials per row, {mode} bench processes, load={args.load} busy processes, "
          f"min_effect={args.min_effect}, "
          f"recorded in {wall:.0f}s; A/A paired log-ratio sd {np.std(np.log(values['aa']) - np.log(b), ddof=1):.3f}")
    print(f"{'truth':<5} {'rule':<9} {'rate':>6} {'95% CI':>16} {'pairs':>6}  verdicts")
    for truth, rule, rate, ci, counts, pairs_s in rows:
        what = "false" if truth == "A/A" else "found"
        print(f"{truth:<5} {rule:<9} {rate:>6.1%} [{ci[0]:>5.1%}, {ci[1]:>5.1%}] {pairs_s:>6}  {what}: {counts}")


if __name__ == "__main__":
    main()
