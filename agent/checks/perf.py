"""Perf sampling: the bench as separate processes, sides interleaved, order shuffled each round.

One round runs every side once (baseline, candidate, and the reference when asked), in a
random order, so drift (thermal, page cache, a neighbour's job) hits all sides alike. The
first round is a warm-up and is discarded. Sampling stops once the candidate's interval is
narrower than the task's minimum effect, or at `max_pairs`.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from agent.checks.stats import Comparison, compare
from agent.env.sandbox import base_env, run_command
from agent.task import PerfSpec
from agent.util.text import tail


@dataclass(frozen=True)
class SamplingPolicy:
    min_pairs: int
    max_pairs: int
    warmup: int = 1


# Four pairs is the fewest at which the rank test can reach p < 0.05 at all.
FULL = SamplingPolicy(min_pairs=5, max_pairs=15)
QUICK = SamplingPolicy(min_pairs=4, max_pairs=5)


class BenchError(Exception):
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


def parse_metric(output: str, metric: str) -> tuple[float, str | None]:
    """The value (and unit) of the one JSON line whose "metric" is `metric`.

    More than one such line is an error: code under test could print a forged line of its own
    (at exit, say), and "the last one wins" would let it.
    """
    seen: list[str] = []
    found: tuple[float, str | None] | None = None
    count = 0
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
            count += 1
            try:
                found = (float(obj["value"]), obj.get("unit"))
            except (KeyError, TypeError, ValueError):
                raise ValueError(f'metric {metric!r} has no numeric "value": {line[:200]}') from None
    if found is None:
        printed = ", ".join(dict.fromkeys(seen)) or "none"
        raise ValueError(f"metric {metric!r} not printed (metrics printed: {printed})")
    if count > 1:
        raise ValueError(f"metric {metric!r} printed {count} times; exactly one line is accepted")
    return found


def perf_env(root: Path) -> dict[str, str]:
    return base_env({"PYTHONPATH": str(root)})


def run_bench(side: str, root: Path, spec: PerfSpec) -> tuple[float, str | None]:
    res = run_command(spec.command, root, timeout_s=spec.timeout_s, env=perf_env(root))
    if not res.ok:
        why = f"timed out after {spec.timeout_s:g}s" if res.timed_out else f"exit code {res.exit_code}"
        raise BenchError(side, f"{side} bench failed ({why}): {tail(res.output.strip(), 1500)}")
    try:
        return parse_metric(res.output, spec.metric)
    except ValueError as e:
        raise BenchError(side, f"{side} bench: {e}") from None


def sample(sides: dict[str, Path], spec: PerfSpec, policy: SamplingPolicy, *, seed: int,
           log: Callable[[str], None] = lambda _: None,
           bench: Callable[[str, Path, PerfSpec], tuple[float, str | None]] = run_bench) -> Samples:
    """Interleaved rounds over `sides` (must include "baseline" and "candidate")."""
    rng = random.Random(seed)
    values: dict[str, list[float]] = {s: [] for s in sides}
    warmup: dict[str, list[float]] = {s: [] for s in sides}
    unit = None
    comparison = None
    for rnd in range(policy.warmup + policy.max_pairs):
        order = list(sides)
        rng.shuffle(order)
        is_warmup = rnd < policy.warmup
        if rnd == 0:  # the baseline first: a bench that is broken for everyone is the task's fault
            order.remove("baseline")
            order.insert(0, "baseline")
        t = time.monotonic()
        for side in order:
            value, unit = bench(side, sides[side], spec)
            (warmup if is_warmup else values)[side].append(value)
        label = "warm-up" if is_warmup else f"pair {rnd - policy.warmup + 1}/{policy.max_pairs}"
        log(f"perf {label}: " + ", ".join(f"{s}={(warmup if is_warmup else values)[s][-1]:.4g}" for s in sides)
            + f" ({time.monotonic() - t:.1f}s)")
        n = rnd - policy.warmup + 1
        if n >= policy.min_pairs:
            comparison = compare(values["baseline"], values["candidate"], spec.direction, spec.min_effect, seed)
            if comparison.precise:
                break
    return Samples(values=values, warmup=warmup, unit=unit, comparison=comparison)
