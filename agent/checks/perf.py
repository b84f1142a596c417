"""Perf sampling: the bench as separate processes, sides interleaved, order shuffled each round.

One round runs every side once (baseline, candidate, and the reference when asked), in a
random order, so drift (thermal, page cache, a neighbour's job) hits all sides alike, and a
round's candidate and baseline values form a pair. The first round is a warm-up and is
discarded. From `min_pairs` on, every round is a look (agent.checks.stats): sampling stops as
soon as the change is significant at the per-look level that keeps the overall A/A error at 5%,
or the interval is narrower than the task's minimum effect and holds 1; at `max_pairs` an
answer that is still unclear is "inconclusive".
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from agent.checks.stats import Comparison, compare_paired, sequential_alpha, stop_reason
from agent.env.sandbox import base_env, run_command
from agent.task import PerfSpec
from agent.util.text import tail


@dataclass(frozen=True)
class SamplingPolicy:
    min_pairs: int
    max_pairs: int
    warmup: int = 1


# The per-look level of FULL is ~0.015, which the signed-rank test can reach from 8 pairs on (all
# eight one way); looks before that can still stop for precision, so identical code stops at 5.
# QUICK (the agent's run_checks): level ~0.039, reachable from 6 pairs.
FULL = SamplingPolicy(min_pairs=5, max_pairs=20)
QUICK = SamplingPolicy(min_pairs=4, max_pairs=8)


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


def perf_env(root: Path, bin_dir: Path | None = None) -> dict[str, str]:
    return base_env({"PYTHONPATH": str(root)}, bin_dir=bin_dir)


def run_bench(side: str, root: Path, spec: PerfSpec, bin_dir: Path | None = None) -> tuple[float, str | None]:
    """One bench process, started from scratch: never forked from a warm interpreter, whose memory
    layout every child would share (an A/A measured 0.88x-1.15x between two such servers)."""
    res = run_command(spec.command, root, timeout_s=spec.timeout_s, env=perf_env(root, bin_dir))
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
    """Interleaved rounds over `sides` (must include "baseline" and "candidate"), looking after each."""
    rng = random.Random(seed)
    level = sequential_alpha(policy.min_pairs, policy.max_pairs)
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
            comparison = compare_paired(values["baseline"], values["candidate"], spec.direction, spec.min_effect,
                                        seed, alpha=level)
            why = stop_reason(comparison, last=n >= policy.max_pairs)
            if why is not None:
                comparison = comparison.model_copy(update={"stop_reason": why})
                break
    return Samples(values=values, warmup=warmup, unit=unit, comparison=comparison)
