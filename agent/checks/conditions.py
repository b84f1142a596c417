"""The machine's conditions while a perf sampling ran, and whether two figures can be compared.

A 95% interval describes one sampling's noise, not how its figure moves when the machine is
shared: on a busy machine one patch measured twice can give 2.5x and 5x, both "significant". So
every sampling records what else the machine did meanwhile, and a figure taken on a busy
machine says so, and two figures taken under different conditions are never called different.

What is read (`snapshot`, `runnable`): /proc/stat's CPU jiffies and /proc/loadavg (around the
sampling, and the runnable count after each round, when no bench of ours runs), each CPU's
cpufreq `scaling_cur_freq` where the kernel exposes it, and the GPU's SM and memory clocks where
nvidia-smi answers. Absent readings are not recorded; they are never an error. What they mean
(`measure`, `busy`, `comparable`) is pure: two snapshots and what our own bench processes used
(the outside clock's CPU figures) make a `Conditions`; "others" are the machine's busy time minus ours.
"""

from __future__ import annotations

import os
import resource
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

# Thresholds of a busy machine: other processes used a quarter of its CPU time, or kept half a
# runnable task per core waiting beside our bench (how often figures agree run to run, idle and
# loaded: tests/bench/bench_reproducibility.py).
BUSY_OTHERS_SHARE = 0.25
BUSY_RUNNABLE_PER_CORE = 0.5
CLOCK_TOLERANCE = 0.10  # two clocks further apart than this do not time alike (boost, throttling, pinning)

PROC_STAT = Path("/proc/stat")
PROC_LOADAVG = Path("/proc/loadavg")
CPU_SYS = Path("/sys/devices/system/cpu")


@dataclass(frozen=True)
class Snapshot:
    """One reading of the machine. Jiffies are /proc/stat's clock ticks summed over every CPU."""

    at: float  # time.monotonic()
    busy_jiffies: int  # user + nice + system + irq + softirq + steal
    total_jiffies: int  # busy + idle + iowait
    cpus: int  # the per-CPU lines of /proc/stat
    load1: float | None = None  # /proc/loadavg's 1-minute load average
    self_cpu_s: float = 0.0  # this process's own CPU time (the harness reading it)
    cpu_mhz: float | None = None  # mean scaling_cur_freq over the CPUs that expose it
    gpu_sm_mhz: int | None = None
    gpu_mem_mhz: int | None = None
    hz: int = 100  # clock ticks per second (USER_HZ)


class Conditions(BaseModel):
    """What the machine did while one sampling ran. Shares are of the machine's whole CPU time
    (every core) over the sampling's wall time; `others_share` is what processes other than our
    bench used; `runnable_per_core` counts the runnable tasks beside ours, per core."""

    wall_s: float = 0.0
    cpus: int = 1
    busy_share: float | None = None  # the machine's busy share, everything counted
    ours_share: float | None = None  # our bench processes (and the harness reading them)
    others_share: float | None = None
    runnable_per_core: float | None = None  # mean over the readings between rounds, our reader excluded
    load1: float | None = None  # the 1-minute load average when sampling ended
    cpu_mhz: float | None = None  # mean CPU clock over the sampling (start and end readings)
    gpu_sm_mhz: int | None = None  # the lower of the start and end readings
    gpu_mem_mhz: int | None = None


def parse_stat(text: str) -> tuple[int, int, int]:
    """(busy jiffies, total jiffies, CPUs) from /proc/stat's text; iowait counts as idle, steal as busy."""
    busy = total = cpus = 0
    for line in text.splitlines():
        if line.startswith("cpu "):
            f = [int(x) for x in line.split()[1:]] + [0] * 10
            user, nice, system, idle, iowait, irq, softirq, steal = f[:8]  # guest time is inside user
            busy = user + nice + system + irq + softirq + steal
            total = busy + idle + iowait
        elif line.startswith("cpu") and line[3:4].isdigit():
            cpus += 1
    if total <= 0:
        raise ValueError("no aggregate 'cpu' line in /proc/stat")
    return busy, total, max(cpus, 1)


def parse_loadavg(text: str) -> tuple[float, int]:
    """(1-minute load average, tasks runnable now) from /proc/loadavg's "0.5 0.4 0.3 3/274 1234"."""
    parts = text.split()
    return float(parts[0]), int(parts[3].split("/")[0])


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _cpu_mhz() -> float | None:
    """Mean current clock of the CPUs whose cpufreq is readable (kHz in sysfs); None without cpufreq (many VMs)."""
    khz = []
    for f in CPU_SYS.glob("cpu[0-9]*/cpufreq/scaling_cur_freq"):
        try:
            khz.append(int((_read(f) or "").strip()))
        except ValueError:
            continue
    return round(sum(khz) / len(khz) / 1000, 1) if khz else None


def _gpu_clocks() -> tuple[int | None, int | None]:
    """The first visible GPU's SM and memory clocks where nvidia-smi is here (agent.env.gpu); else nothing."""
    if shutil.which("nvidia-smi") is None:
        return None, None
    from agent.env.gpu import first_visible  # the one GPU probe

    card = first_visible()
    return (card.sm_clock_mhz, card.mem_clock_mhz) if card is not None else (None, None)


def snapshot(*, gpu: bool = True) -> Snapshot | None:
    """The machine now; None where /proc/stat cannot be read (not Linux)."""
    text = _read(PROC_STAT)
    try:
        busy, total, cpus = parse_stat(text or "")
    except ValueError:
        return None
    load = _read(PROC_LOADAVG)
    try:
        load1 = parse_loadavg(load)[0] if load else None
    except (ValueError, IndexError):
        load1 = None
    sm, mem = _gpu_clocks() if gpu else (None, None)
    me = resource.getrusage(resource.RUSAGE_SELF)
    return Snapshot(at=time.monotonic(), busy_jiffies=busy, total_jiffies=total, cpus=cpus, load1=load1,
                    self_cpu_s=me.ru_utime + me.ru_stime, cpu_mhz=_cpu_mhz(), gpu_sm_mhz=sm, gpu_mem_mhz=mem,
                    hz=os.sysconf("SC_CLK_TCK"))


def runnable() -> int | None:
    """Tasks runnable on the machine now (/proc/loadavg), this reader included."""
    text = _read(PROC_LOADAVG)
    try:
        return parse_loadavg(text)[1] if text else None
    except (ValueError, IndexError):
        return None


def _mean(*xs: float | None) -> float | None:
    got = [x for x in xs if x is not None]
    return sum(got) / len(got) if got else None


def _low(*xs: int | None) -> int | None:
    got = [x for x in xs if x is not None]
    return min(got) if got else None


def measure(first: Snapshot, last: Snapshot, *, ours_cpu_s: float, running: Sequence[int] = ()) -> Conditions:
    """The conditions between two snapshots. `ours_cpu_s`: our bench processes' CPU seconds over the
    same span (the outside clock's figures); `running`: runnable counts read between rounds, each
    including the one task that read it."""
    total = last.total_jiffies - first.total_jiffies
    wall = max(0.0, last.at - first.at)
    c = Conditions(wall_s=round(wall, 3), cpus=last.cpus, load1=last.load1,
                   cpu_mhz=_mean(first.cpu_mhz, last.cpu_mhz), gpu_sm_mhz=_low(first.gpu_sm_mhz, last.gpu_sm_mhz),
                   gpu_mem_mhz=_low(first.gpu_mem_mhz, last.gpu_mem_mhz))
    if running:
        others = [max(0, n - 1) for n in running]
        c.runnable_per_core = round(sum(others) / len(others) / last.cpus, 3)
    if total <= 0:
        return c
    busy = min(1.0, max(0.0, (last.busy_jiffies - first.busy_jiffies) / total))
    ours_s = max(0.0, ours_cpu_s) + max(0.0, last.self_cpu_s - first.self_cpu_s)
    ours = min(busy, ours_s * last.hz / total)
    c.busy_share, c.ours_share, c.others_share = round(busy, 3), round(ours, 3), round(busy - ours, 3)
    return c


def busy_why(c: Conditions | None) -> str | None:
    """Why the machine was busy while `c` was measured, in words; None when it was not (or nobody knows)."""
    if c is None:
        return None
    parts = []
    if c.others_share is not None and c.others_share >= BUSY_OTHERS_SHARE:
        parts.append(f"other processes used {c.others_share:.0%} of its CPU")
    if c.runnable_per_core is not None and c.runnable_per_core >= BUSY_RUNNABLE_PER_CORE:
        parts.append(f"{c.runnable_per_core:.1f} other runnable tasks per core")
    return "busy machine: " + ", ".join(parts) if parts else None


def busy(c: Conditions | None) -> bool:
    return busy_why(c) is not None


def _apart(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and abs(a - b) > CLOCK_TOLERANCE * max(a, b)


def comparable(a: Conditions | None, b: Conditions | None, names: tuple[str, str] = ("first", "second")
               ) -> tuple[bool, str]:
    """Whether figures measured under `a` and under `b` may be called different, and why (not).
    Either measured on a busy machine, or at CPU or GPU clocks more than 10% apart: not comparable.
    Conditions not recorded (reports from before them) are taken as they always were: comparable."""
    if a is None or b is None:
        return True, "conditions not recorded"
    why = [f"{side}: {w}" for side, c in zip(names, (a, b)) if (w := busy_why(c))]
    if _apart(a.cpu_mhz, b.cpu_mhz):
        why.append(f"CPU clock {a.cpu_mhz:.0f} vs {b.cpu_mhz:.0f} MHz")
    if _apart(a.gpu_sm_mhz, b.gpu_sm_mhz):
        why.append(f"GPU SM clock {a.gpu_sm_mhz} vs {b.gpu_sm_mhz} MHz")
    if _apart(a.gpu_mem_mhz, b.gpu_mem_mhz):
        why.append(f"GPU memory clock {a.gpu_mem_mhz} vs {b.gpu_mem_mhz} MHz")
    return (False, "; ".join(why)) if why else (True, "measured under like conditions")


def text(c: Conditions) -> str:
    """One line for a report: "others 12% CPU, 0.3 runnable/core, load 1.2, CPU 2400 MHz, GPU 1980/2619 MHz"."""
    parts = []
    if c.others_share is not None:
        parts.append(f"others {c.others_share:.0%} CPU")
    if c.runnable_per_core is not None:
        parts.append(f"{c.runnable_per_core:.1f} runnable/core")
    if c.load1 is not None:
        parts.append(f"load {c.load1:.1f} on {c.cpus} cores")
    if c.cpu_mhz is not None:
        parts.append(f"CPU {c.cpu_mhz:.0f} MHz")
    if c.gpu_sm_mhz is not None:
        parts.append(f"GPU SM {c.gpu_sm_mhz}" + (f"/mem {c.gpu_mem_mhz}" if c.gpu_mem_mhz is not None else "") + " MHz")
    return ", ".join(parts)
