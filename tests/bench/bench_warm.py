"""What one child of a warm server costs: `python tests/bench/bench_warm.py [-n 20]`.

Times a bench sample (agent.checks.perf.Bench, a stdlib bench printing its metric, the server
wiping /tmp and the rest after it) and a test run (agent.checks.launch.Launcher, `python t.py`),
each on a server that is already up, and prints JSON lines {"metric", "value", "unit"}: the
median wall time of each, in ms (torch, where installed, is imported once per server, before
the first child, which is not timed), and what a new test server's first run costs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from agent.checks.correctness import check_env, install_hook
from agent.checks.launch import Launcher
from agent.checks.perf import Bench
from agent.env.warm import WarmPython
from agent.task import PerfSpec

BENCH = 'import json\nprint(json.dumps({"metric": "m", "value": 1.0}))\n'


def _median_ms(fn, n: int) -> float:
    fn()  # the first child pays for the server's start
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=20, help="children timed, each kind")
    args = ap.parse_args()
    if not WarmPython.available():
        raise SystemExit("warm servers need bubblewrap")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "side-c" / "repo"
        root.mkdir(parents=True)
        (root / "bench.py").write_text(BENCH)
        (root / "t.py").write_text("print('ok')\n")
        spec = PerfSpec(command="python bench.py", metric="m", timeout_s=60)
        bench = Bench(spec, {"baseline": root, "candidate": root}, Path(tmp) / "scratch")
        try:
            ms = _median_ms(lambda: bench("candidate", root, spec), args.n)
            assert bench.mode == "forked from one warm server", bench.mode
            print(json.dumps({"metric": "bench_sample_ms", "value": round(ms, 2), "unit": "ms"}))
        finally:
            bench.close()
        env = check_env(root, install_hook(Path(tmp) / "hook"))
        firsts = []
        for _ in range(5):  # what a full evaluation's new test server costs: its start and first run
            launcher = Launcher(root, env)
            t = time.perf_counter()
            launcher.run("python t.py", timeout_s=60)
            firsts.append((time.perf_counter() - t) * 1000)
            launcher.close()
        print(json.dumps({"metric": "test_server_first_run_ms", "value": round(statistics.median(firsts), 1),
                          "unit": "ms"}))
        launcher = Launcher(root, env)
        try:
            ms = _median_ms(lambda: launcher.run("python t.py", timeout_s=60), args.n)
            assert [s for s in launcher._servers.values() if s is not None], "the test runs went cold"
            print(json.dumps({"metric": "test_run_ms", "value": round(ms, 2), "unit": "ms"}))
        finally:
            launcher.close()


if __name__ == "__main__":
    main()
