"""What the sandbox costs per command: `python tests/bench/bench_sandbox.py [-n 50]`.

Runs the same commands through `run_command` (sealed with bubblewrap where it works) and as
a bare `bash -c` with the same environment, alternating, and prints JSON lines
{"metric", "value", "unit"}: the median wall time of each and the median overhead.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time

from agent.env.sandbox import base_env, isolation, run_command

COMMANDS = {"true": "true", "python": "python -c pass"}


def bare(command: str, cwd: str, env: dict[str, str]) -> None:
    subprocess.run(["bash", "-c", command], cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=50, help="runs of each command, each way")
    args = ap.parse_args()
    env = base_env()
    print(json.dumps({"metric": "isolation", "value": isolation().mode, "unit": None}))
    with tempfile.TemporaryDirectory() as cwd:
        for name, command in COMMANDS.items():
            sealed, plain = [], []
            for _ in range(args.n):
                t = time.perf_counter()
                assert run_command(command, cwd, env=env).ok
                sealed.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                bare(command, cwd, env)
                plain.append((time.perf_counter() - t) * 1000)
            for metric, values in ((f"{name}_sealed_ms", sealed), (f"{name}_bare_ms", plain),
                                   (f"{name}_overhead_ms", [s - p for s, p in zip(sealed, plain)])):
                print(json.dumps({"metric": metric, "value": round(statistics.median(values), 2), "unit": "ms"}))


if __name__ == "__main__":
    main()
