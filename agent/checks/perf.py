"""Perf sampling: the bench as separate processes, sides interleaved, order shuffled each round.

Where the bench is a plain `python script.py` and bubblewrap is here, every sample is a child
forked from one warm server shared by all sides (see `Bench`): a round of three samples then
takes a fraction of a second instead of three interpreter and torch start-ups, so its samples
are close enough in time to share the machine's drift, and the pairs get tighter.

One round runs every side once (baseline, candidate, and the reference when asked), in a
random order, so drift (thermal, page cache, a neighbour's job) hits all sides alike, and a
round's candidate and baseline values form a pair. The first round is a warm-up and is
discarded. From `min_pairs` on, sampling stops as soon as the change is significant at one of
the policy's looks, at the per-look level that keeps the overall A/A error at 5%
(agent.checks.stats), or the interval is narrower than the task's minimum effect and holds 1;
at `max_pairs` an answer that is still unclear is "inconclusive".
"""

from __future__ import annotations

import json
import math
import random
import re
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, NamedTuple, NoReturn

from agent.checks import clocks, firstcall
from agent.checks.conditions import Conditions, measure, runnable, snapshot
from agent.checks.confirm import settled
from agent.checks.correctness import pytest_env
from agent.checks.records import new_key
from agent.checks.verdicts import CheckError, PerfVerdict
from agent.checks.stats import Comparison, compare_paired, sequential_alpha, stop_reason, testing_at
from agent.env.runners import SANDBOXED, CommandRunner
from agent.env.sandbox import CommandResult, SandboxSpec, base_env, real_paths, scratch_places
from agent.env.warm import WarmError, WarmPython, parse_python, torch_preload
from agent.task import PerfSpec
from agent.util.text import tail
from agent.errors import PerfagentError


_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True)
class SamplingPolicy:
    min_pairs: int
    max_pairs: int
    warmup: int = 1
    looks: tuple[int, ...] | None = None  # the rounds after which the test may call a change; None: every one
    # a "faster" answer waits (up to max_pairs) until the harness's clock answers it, and the samples' own
    # first calls where the task names their metric (a quick check judges neither)
    confirm: bool = False

    def at_most(self, pairs: int | None) -> SamplingPolicy:
        """This policy stopping by round `pairs` (a task's `max_pairs`), its last round a look."""
        if pairs is None or pairs >= self.max_pairs:
            return self
        looks = None if self.looks is None else tuple(n for n in self.looks if n < pairs) + (pairs,)
        return replace(self, min_pairs=min(self.min_pairs, pairs), max_pairs=pairs, looks=looks)


# FULL tests after 7, 8, 10, 12, 15 and 20 pairs at ~0.017 per look, which the signed-rank test
# reaches from 7 pairs on (all seven one way; a look after every round would need 8); every round
# from 5 on can still stop for precision, so identical code stops at 5. QUICK (the agent's
# run_checks): a look after every round at ~0.039, reachable from 6 pairs. Only FULL (the graded answer)
# samples on while the harness's clock has neither seen nor ruled out a "faster" (agent.checks.confirm).
FULL = SamplingPolicy(min_pairs=5, max_pairs=20, looks=(7, 8, 10, 12, 15, 20), confirm=True)
QUICK = SamplingPolicy(min_pairs=4, max_pairs=8)


class RoundLost(Exception):
    """The warm bench server can no longer be trusted or used: the round is run again, cold."""


class BenchError(PerfagentError):
    """A bench run failed or did not print the metric; `side` says whose."""

    def __init__(self, side: str, message: str):
        super().__init__(message)
        self.side = side


@dataclass
class Samples:
    values: dict[str, list[float]]
    warmup: dict[str, list[float]]
    unit: str | None
    comparison: Comparison | None
    timer: str | None = None  # how the bench says it timed (the baseline's last line)
    # per side, next to `values` (warm-up excluded): each sample's process as the harness saw it,
    # its wall and CPU time in seconds (None where unknown); agent.checks.confirm holds the metric to them
    wall: dict[str, list[float | None]] = field(default_factory=dict)
    cpu: dict[str, list[float | None]] = field(default_factory=dict)
    lines: int = 1  # lines of the metric a baseline process printed (the most seen)
    conditions: Conditions | None = None  # the machine meanwhile (agent.checks.conditions)
    first: dict[str, list[float]] = field(default_factory=dict)  # the task's first_call_metric, next to `values`


class Reading(NamedTuple):
    """One bench sample: the metric's value, its unit, and how the bench says it timed it
    ("cuda-events, L2 flushed"), from the optional "timer" and "l2_flushed" keys of its line; and
    what the harness saw of its process from outside, out of the code's reach: wall and CPU
    seconds (None where unknown), which the metric's claimed gain must agree with. `lines`: how
    many lines of the metric the process printed (its value is their median). `first`: the task's
    first_call_metric, where it names one: the process's first call alone."""

    value: float
    unit: str | None = None
    timer: str | None = None
    wall_s: float | None = None
    cpu_s: float | None = None
    lines: int = 1
    first: float | None = None


def _timer(obj: dict) -> str | None:
    timer = obj.get("timer")
    if not isinstance(timer, str) or not timer:
        return None
    flushed = obj.get("l2_flushed")
    return timer[:60] + ("" if flushed is None else ", L2 flushed" if flushed else ", L2 not flushed")


def parse_metric(output: str, metric: str) -> Reading:
    """The median of the JSON lines whose "metric" is `metric`, with the first one's unit and timer.

    A bench that times several calls in one process may print a line for each: they are that
    process's samples. Code under test can print lines of its own; the harness's own clock on the
    same process (agent.checks.confirm), not a line count, is what holds a forged value to account.
    """
    seen: list[str] = []
    found: list[float] = []
    first: dict = {}
    for line in output.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(obj, dict) or "metric" not in obj:
            continue
        seen.append(str(obj["metric"]))
        if obj["metric"] == metric:
            try:
                value = float(obj["value"])
            except (KeyError, TypeError, ValueError):
                raise ValueError(f'metric {metric!r} has no numeric "value": {line[:200]}') from None
            if not math.isfinite(value):
                raise ValueError(f"metric {metric!r} is not a finite number: {line[:200]}")
            found.append(value)
            first = first or obj
    if not found:
        printed = ", ".join(dict.fromkeys(seen)) or "none"
        raise ValueError(f"metric {metric!r} not printed (metrics printed: {printed})")
    unit = first.get("unit")
    return Reading(statistics.median(found), unit if isinstance(unit, str) else None, _timer(first),
                   lines=len(found))


def perf_env(root: Path, bin_dir: Path | None = None) -> dict[str, str]:
    return base_env({"PYTHONPATH": str(root), **pytest_env()}, bin_dir=bin_dir)


def run_bench(side: str, root: Path, spec: PerfSpec, bin_dir: Path | None = None,
              sandbox: SandboxSpec = SandboxSpec(), runner: CommandRunner = SANDBOXED) -> Reading:
    """One bench process, started from scratch in its own sandbox (the task's: `sandbox`)."""
    res = runner.run(spec.command, root, sandbox=sandbox, timeout_s=spec.timeout_s, env=perf_env(root, bin_dir),
                     account_cpu=True)
    return _metric(side, res, spec)


def run_guarded(root: Path, spec: PerfSpec, hook: Path, key: str, bin_dir: Path | None = None,
                sandbox: SandboxSpec = SandboxSpec(), runner: CommandRunner = SANDBOXED) -> CommandResult:
    """One bench process from scratch with our hook first on PYTHONPATH and the clock guard on
    (agent.checks.clocks), its key on a descriptor of its own."""
    with clocks.KeyFile(key) as k:
        env = {**perf_env(root, bin_dir), "PYTHONPATH": f"{hook}:{root}", **k.env}
        return runner.run(spec.command, root, sandbox=sandbox, timeout_s=spec.timeout_s, env=env, account_cpu=True,
                          pass_fds=k.fds)


def _swept(side: str, res: CommandResult) -> None:
    """No sample is taken beside what a bench left running that could not be ended: the evaluation
    is an error (CheckError), never a round run again as if nothing happened."""
    if res.escaped:
        raise CheckError(f"the {side} bench: {res.escaped}")


def _metric(side: str, res: CommandResult, spec: PerfSpec) -> Reading:
    _swept(side, res)
    if not res.ok:
        why = f"timed out after {spec.timeout_s:g}s" if res.timed_out else f"exit code {res.exit_code}"
        raise BenchError(side, f"{side} bench failed ({why}): {tail(res.output.strip(), 1500)}")
    try:
        first = parse_metric(res.output, spec.first_call_metric).value if spec.first_call_metric else None
        return parse_metric(res.output, spec.metric)._replace(wall_s=res.wall_s, cpu_s=res.cpu_s, first=first)
    except ValueError as e:
        raise BenchError(side, f"{side} bench: {e}") from None


class Bench:
    """One bench sample per call, for every side of one sampling.

    Warm: a child forked from one server that has imported torch, in a sandbox where every
    side's checkout is read-only, at /perfagent/side-N/<name> (apart from the shared scratch places,
    so a Landlock rule can take the other sides from a child without taking its /tmp). Before it
    imports its side's code from scratch, the child loses read access to every other side's
    checkout for good (agent.env.zygote._hide), so a candidate cannot time the reference's code
    as its own, and where the kernel has no Landlock the samples are run cold. Every child
    shares the server's memory layout, which biases timings by up to 0.88x-1.15x between two
    servers; one server for all sides makes that bias common to a round's samples, so it cancels
    in their ratios. After each child the server kills what it left running, empties /tmp,
    /dev/shm, HOME and its own folder, restores /dev and removes SysV IPC objects, so a candidate
    cannot leave anything for the baseline (or for its own next sample, a cache).
    Cold (`run_bench`): where the command is not plain Python, there is no bubblewrap, or the
    warm server failed: the server died, a child left something it could not remove, or the
    bench fails forked but not from scratch. Then `RoundLost` is raised and that round is run again,
    cold like every later one, so no round mixes the two.
    """

    def __init__(self, spec: PerfSpec, sides: dict[str, Path], scratch: Path, *, bin_dir: Path | None = None,
                 sandbox: SandboxSpec = SandboxSpec(), runner: CommandRunner = SANDBOXED, warm: bool = True,
                 hook: Path | None = None):
        # `sandbox`: the task's (SandboxSpec.for_task); `runner`: how a fresh process runs (agent.env.runners)
        self.bin_dir, self.sandbox, self.runner = bin_dir, sandbox, runner
        # `hook`: our hook's folder (agent.checks.clocks.install): every process then runs the clock guard
        self.hook, self.clocks = hook, clocks.ClockCheck()
        # where the warm server's sandbox shows each side's checkout: same length for every side
        self.inside = {side: Path("/perfagent") / f"side-{n}" / root.name
                       for n, (side, root) in enumerate(sides.items())}
        self.server: WarmPython | None = None
        # The first baseline call learns (agent.env.warm.WarmPython.run): the server then imports what it
        # imported of the interpreter's installation (SGLang's bench: ~1000 modules, half its process),
        # once for every later child. Its own sample must be one the caller discards: a warm-up.
        self.learn = False
        self.learned = 0  # how many modules the server imported so
        self.mode = "fresh processes"  # how the samples were started, for the report
        self.command, self.cmd = spec.command, (cmd := parse_python(spec.command))
        if warm and cmd is not None and WarmPython.available():
            scratch.mkdir(parents=True, exist_ok=True)
            self.mode = "forked from one warm server"
            served = {**pytest_env(), **({"PYTHONPATH": str(hook)} if hook else {})}
            shown = tuple(zip(real_paths(tuple(sides.values())), self.inside.values()))
            self.server = WarmPython(cmd.interpreter, scratch, env=base_env(served, bin_dir=bin_dir),
                                     sandbox=replace(sandbox, readable=(*sandbox.readable, *shown)),
                                     wipe=(*scratch_places(), str(scratch)),
                                     preload=torch_preload(*sides.values()))

    def __call__(self, side: str, root: Path, spec: PerfSpec) -> Reading:
        # another command of the same interpreter (the task's first_call) forks from the same server: no
        # second torch import, and the same memory layout as the samples it is compared with
        cmd = self.cmd if spec.command == self.command else parse_python(spec.command)
        if self.server is None or self.cmd is None or cmd is None or cmd.interpreter != self.cmd.interpreter:
            return self._fresh(side, root, spec)
        key = new_key() if self.hook else None
        try:
            place = self.inside[side]
            learn = self.learn and side == "baseline"
            self.learn = self.learn and not learn
            res = self.server.run(cmd, timeout_s=spec.timeout_s, cwd=place, key=key,
                                  env={"PYTHONPATH": str(place), **(clocks.ENV if key else {})},
                                  path=(str(place),), hide=tuple(p for p in self.inside.values() if p != place),
                                  learn=learn)
        except WarmError as e:
            self._cold(f"the warm bench server ended ({e})")
        self.learned = self.server.learned
        _swept(side, res)
        if not self.server.clean:
            self._cold(f"the {side} bench left something behind that could not be removed")
        try:
            reading = _metric(side, res, spec)
            if key is not None:
                self.clocks.add(side, clocks.read(res.output, key))
            return reading
        except BenchError as e:
            if res.timed_out:
                raise
            self._run_bench(side, root, spec)  # raises if it fails from scratch as well
            self._cold(f"the {side} bench fails forked ({tail(str(e), 300)}) but not from scratch")

    def _fresh(self, side: str, root: Path, spec: PerfSpec) -> Reading:
        if self.hook is None:
            return self._run_bench(side, root, spec)
        key = new_key()
        res = run_guarded(root, spec, self.hook, key, self.bin_dir, self.sandbox, self.runner)
        reading = _metric(side, res, spec)
        self.clocks.add(side, clocks.read(res.output, key))
        return reading

    def _run_bench(self, side: str, root: Path, spec: PerfSpec) -> Reading:
        return run_bench(side, root, spec, self.bin_dir, self.sandbox, self.runner)

    def _cold(self, why: str) -> NoReturn:
        self.close()
        self.mode = f"forked from one warm server, then fresh processes: {why}"
        raise RoundLost(why)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None


def _first_call_answered(comparison: Comparison, first: dict[str, list[float]], spec: PerfSpec, seed: int,
                         level: float) -> bool:
    """Whether the first calls timed so far (`first_call_metric`) answer what agent.checks.firstcall asks of
    this comparison: faster too, or ruling out the saving each repeated call shows (a cache). Until then
    sampling goes on: a gain the first call has not answered is never "faster"."""
    if not firstcall.needed(comparison.verdict, comparison.ratio, spec):
        return True
    if len(first["baseline"]) != len(first["candidate"]) or len(first["candidate"]) < 2:
        return True  # a side without the line: the samples say so, an error of that side
    alone = compare_paired(first["baseline"], first["candidate"], spec.direction, spec.min_effect, seed, alpha=level)
    expected = firstcall.expected_ratio(comparison.baseline_median - comparison.candidate_median, alone,
                                        spec.direction)
    return alone.verdict == PerfVerdict.FASTER or (expected is not None and alone.ci_low > expected)


def warm_up(sides: dict[str, Path], spec: PerfSpec, policy: SamplingPolicy, *,
            log: Callable[[str], None] = lambda _: None,
            bench: Callable[[str, Path, PerfSpec], Reading] = run_bench) -> dict[str, list[float]] | None:
    """`policy`'s warm-up rounds, the baseline first, ahead of `sample` (pass it their values as `warmed`):
    they are discarded, so they may run while the machine still does other work (the poisoned tests).
    None where a round was lost or a bench failed: `sample` then warms up itself, and says why."""
    warmup: dict[str, list[float]] = {s: [] for s in sides}
    try:
        for _ in range(policy.warmup):
            for side in ("baseline", *(s for s in sides if s != "baseline")):
                warmup[side].append(bench(side, sides[side], spec)[0])
    except (RoundLost, BenchError):
        return None
    log("perf warm-up, ahead of the sampling: " + ", ".join(f"{s}={v[-1]:.4g}" for s, v in warmup.items() if v))
    return warmup


def sample(sides: dict[str, Path], spec: PerfSpec, policy: SamplingPolicy, *, seed: int,
           log: Callable[[str], None] = lambda _: None,
           bench: Callable[[str, Path, PerfSpec], Reading] = run_bench,
           warmed: dict[str, list[float]] | None = None) -> Samples:
    """Interleaved rounds over `sides` (must include "baseline" and "candidate"), looking after each;
    `warmed`: the warm-up rounds' values where `warm_up` took them already."""
    rng = random.Random(seed)
    before, ours = snapshot(), 0.0  # the machine around the loop; our bench processes' CPU seconds
    running: list[int] = []  # runnable tasks after each round
    level = sequential_alpha(policy.min_pairs, policy.max_pairs, looks=policy.looks)
    values: dict[str, list[float]] = {s: [] for s in sides}
    warmup: dict[str, list[float]] = warmed if warmed is not None else {s: [] for s in sides}
    wall: dict[str, list[float | None]] = {s: [] for s in sides}
    cpu: dict[str, list[float | None]] = {s: [] for s in sides}
    first: dict[str, list[float]] = {s: [] for s in sides} if spec.first_call_metric else {}
    unit = timer = None
    comparison = None
    lines = 1
    for rnd in range(policy.warmup + policy.max_pairs):
        order = list(sides)
        rng.shuffle(order)
        is_warmup = rnd < policy.warmup
        if is_warmup and warmed is not None:
            continue  # its order drawn all the same: one seed, the same pairs in the same order
        if rnd == 0:  # the baseline first: a bench that is broken for everyone is the task's fault
            order.remove("baseline")
            order.insert(0, "baseline")
        t = time.monotonic()
        while True:
            try:
                got = {side: bench(side, sides[side], spec) for side in order}
                break
            except RoundLost as e:
                log(f"perf: {e}; this round and every later one run in fresh processes")
        for side in order:
            value, unit = got[side][:2]
            (warmup if is_warmup else values)[side].append(value)
            if not is_warmup:
                wall[side].append(getattr(got[side], "wall_s", None))
                cpu[side].append(getattr(got[side], "cpu_s", None))
                if first and (alone := getattr(got[side], "first", None)) is not None:
                    first[side].append(alone)
        ours += sum(getattr(r, "cpu_s", None) or 0.0 for r in got.values())
        running += [k] if (k := runnable()) is not None else []  # between rounds: no bench of ours runs
        timer = getattr(got["baseline"], "timer", None)
        lines = max(lines, getattr(got["baseline"], "lines", 1))
        label = "warm-up" if is_warmup else f"pair {rnd - policy.warmup + 1}/{policy.max_pairs}"
        log(f"perf {label}: " + ", ".join(f"{s}={(warmup if is_warmup else values)[s][-1]:.4g}" for s in sides)
            + f" ({time.monotonic() - t:.1f}s)")
        n = rnd - policy.warmup + 1
        if n >= policy.min_pairs:
            comparison = compare_paired(values["baseline"], values["candidate"], spec.direction, spec.min_effect,
                                        seed, alpha=level)
            why = stop_reason(comparison, last=n >= policy.max_pairs,
                              testing=testing_at(n, policy.min_pairs, policy.max_pairs, policy.looks))
            if policy.confirm and n < policy.max_pairs and why is not None:
                clock = settled(comparison, spec.direction, spec.metric, unit, spec.calls or lines, wall, cpu,
                                max_pairs=policy.max_pairs)
                # None: the metric says faster; the harness's clock has not said yes or no yet, and still can
                why = None if clock is None else f"{why}; {clock}" if clock else why
                # the same processes' first calls may still show the gain or its lack (not where the clock can no
                # longer confirm it by max_pairs: "not confirmed" either way)
                if why is not None and not clock and first and not _first_call_answered(comparison, first, spec,
                                                                                        seed, level):
                    why = None
            if why is not None:
                comparison = comparison.model_copy(update={"stop_reason": why})
                break
    after = snapshot() if before is not None else None
    return Samples(values=values, warmup=warmup, unit=unit, comparison=comparison, timer=timer, wall=wall, cpu=cpu,
                   lines=lines, conditions=measure(before, after, ours_cpu_s=ours, running=running)
                   if before is not None and after is not None else None, first=first)
