"""What the sweep after a command costs: `python tests/bench/bench_sweep.py [-n 50]`.

The same sandboxed `true` through `run_command`, interleaved three ways: with the sweep as it is
(freeze, kill, thaw until the cgroup is empty: agent.env.cgroup.Cgroup.end), with the sweep before
it (kill the members by pid in a loop, no freezer; reconstructed here), and with no cgroup at all.
Prints JSON lines {"metric", "value", "unit"}: medians per command, and the sweep's own cost (the
median minus the no-cgroup median).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import tempfile
import time
from contextlib import contextmanager

from agent.env import cgroup
from agent.env.sandbox import isolation, run_command


def old_remove(self: cgroup.Cgroup) -> bool:
    """The sweep before the freezer: kill every member by pid until each group can be removed."""
    deadline = time.monotonic() + 5
    for group in self.dirs:
        while True:
            for pid in cgroup._members(group):
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                group.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)
    return True


@contextmanager
def sweep(kind: str):
    remove, create = cgroup.Cgroup.remove, cgroup.Cgroup.create
    if kind == "old":
        cgroup.Cgroup.remove = old_remove
    if kind == "none":
        cgroup.Cgroup.create = classmethod(lambda cls, *a: None)
    try:
        yield
    finally:
        cgroup.Cgroup.remove, cgroup.Cgroup.create = remove, create


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=50)
    args = parser.parse_args()
    if isolation().mode != "bwrap" or not cgroup.available():
        raise SystemExit("needs bubblewrap and a cgroup")
    kinds = ("new", "old", "none")
    times: dict[str, list[float]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory() as cwd:
        for kind in kinds:  # one unmeasured run each
            with sweep(kind):
                run_command("true", cwd, timeout_s=30)
        for _ in range(args.n):
            for kind in kinds:
                with sweep(kind):
                    t = time.perf_counter()
                    res = run_command("true", cwd, timeout_s=30)
                    times[kind].append((time.perf_counter() - t) * 1000)
                assert res.ok and res.escaped is None, res
    medians = {k: statistics.median(v) for k, v in times.items()}
    for kind in kinds:
        print(json.dumps({"metric": f"true_{kind}_sweep" if kind != "none" else "true_no_cgroup",
                          "value": round(medians[kind], 2), "unit": "ms"}))
    for kind in ("new", "old"):
        print(json.dumps({"metric": f"sweep_{kind}_cost", "value": round(medians[kind] - medians["none"], 2),
                          "unit": "ms"}))


if __name__ == "__main__":
    main()
