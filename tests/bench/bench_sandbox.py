"""What the sandbox costs: `python tests/bench/bench_sandbox.py [-n 50]`.

Per command: the same commands through `run_command`, sealed four ways (the allow-list of mounts or
the whole machine read-only, each with and without a cgroup), and as a bare `bash -c` with the same
environment, all interleaved. Per warm child: a forked bench child with and without the Landlock
rule that hides the other sides' checkouts. Prints JSON lines {"metric", "value", "unit"}: medians.
(Per full evaluation: `bench_eval.py`, on this commit and on one before it.)

"Whole machine" is how the sandbox mounted before the allow-list (`--ro-bind / /`, with the same
folders bound back over the hidden ones); it is made here by rewriting the command line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

from agent.env import cgroup, sandbox
from agent.env.sandbox import SYSTEM_ROOTS, SandboxSpec, base_env, isolation, run_command

COMMANDS = {"true": "true", "python": "python -c pass"}


def bare(command: str, cwd: str, env: dict[str, str]) -> None:
    subprocess.run(["bash", "-c", command], cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True)


@contextmanager
def whole_machine():
    """bwrap sees `/` read-only, as before the allow-list, with every other mount as it is."""
    allow_list = sandbox._bwrap_argv

    def argv(*args, **kwargs):
        out, rest = allow_list(*args, **kwargs), []
        i = 1
        while i < len(out):
            if out[i] in ("--ro-bind", "--symlink") and out[i + 2] in SYSTEM_ROOTS:
                i += 3
                continue
            rest.append(out[i])
            i += 1
        return ["bwrap", "--ro-bind", "/", "/", *rest]

    sandbox._bwrap_argv = argv
    try:
        yield
    finally:
        sandbox._bwrap_argv = allow_list


@contextmanager
def no_cgroup():
    create = cgroup.Cgroup.create
    cgroup.Cgroup.create = classmethod(lambda cls, *a: None)
    try:
        yield
    finally:
        cgroup.Cgroup.create = create


def config(allow_list: bool, groups: bool) -> ExitStack:
    stack = ExitStack()
    if not allow_list:
        stack.enter_context(whole_machine())
    if not groups:
        stack.enter_context(no_cgroup())
    return stack


def emit(metric: str, values: list[float], unit: str = "ms") -> None:
    print(json.dumps({"metric": metric, "value": round(statistics.median(values), 2), "unit": unit}), flush=True)


def per_command(n: int) -> None:
    env = base_env()
    ways = {"allowlist_cgroup": (True, True), "allowlist": (True, False), "whole_cgroup": (False, True),
            "whole": (False, False)}
    with tempfile.TemporaryDirectory() as cwd:
        for name, command in COMMANDS.items():
            times: dict[str, list[float]] = {way: [] for way in [*ways, "bare"]}
            for _ in range(n):
                for way, (allow_list, groups) in ways.items():
                    with config(allow_list, groups):
                        t = time.perf_counter()
                        assert run_command(command, cwd, env=env).ok
                        times[way].append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                bare(command, cwd, env)
                times["bare"].append((time.perf_counter() - t) * 1000)
            for way, values in times.items():
                emit(f"{name}_{way}_ms", values)


def per_warm_child(n: int) -> None:
    from agent.env.warm import WarmPython, parse_python

    with tempfile.TemporaryDirectory() as tmp:
        sides = [Path(tmp) / f"side-{i}" for i in range(3)]
        for side in sides:
            side.mkdir()
            (side / "b.py").write_text("pass\n")
        (Path(tmp) / "scratch").mkdir()
        server = WarmPython("python", Path(tmp) / "scratch", env=base_env(), preload=(),
                            sandbox=SandboxSpec(readable=tuple((side, Path("/perfagent") / side.name / "repo")
                                                               for side in sides)))
        cmd = parse_python("python b.py")
        inside = [Path("/perfagent") / side.name / "repo" for side in sides]
        times: dict[str, list[float]] = {"hidden": [], "plain": []}
        try:
            for _ in range(n):
                for way, hide in (("hidden", tuple(inside[1:])), ("plain", ())):
                    t = time.perf_counter()
                    assert server.run(cmd, timeout_s=60, cwd=inside[0], hide=hide).ok
                    times[way].append((time.perf_counter() - t) * 1000)
        finally:
            server.close()
    for way, values in times.items():
        emit(f"warm_child_{way}_ms", values)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=50, help="runs of each command, each way")
    args = ap.parse_args()
    print(json.dumps({"metric": "isolation", "value": isolation().mode, "unit": None}))
    print(json.dumps({"metric": "cgroup", "value": cgroup.available(), "unit": None}))
    per_command(args.n)
    if isolation().mode == "bwrap":
        per_warm_child(args.n)


if __name__ == "__main__":
    main()
