"""The one GPU probe: which NVIDIA GPUs this machine has and their clocks, by nvidia-smi (no torch, no CUDA context).

The batch asks how many there are (a GPU task is skipped without one); the checks ask which
one a measurement ran on and at what clocks, for the report and the per-device perf lock.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

# One call for the device and the clocks it runs at. "applications_clocks_setting" is Active
# when clocks are pinned (`nvidia-smi -ac` / `-lgc`), which makes timings comparable across runs.
FIELDS = ("name", "driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm",
          "clocks_throttle_reasons.applications_clocks_setting")
QUERY = ["nvidia-smi", f"--query-gpu={','.join(FIELDS)}", "--format=csv,noheader,nounits"]
BASIC_QUERY = ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]


@dataclass(frozen=True)
class Gpu:
    name: str
    driver: str
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    clocks_locked: bool | None = None  # None: nvidia-smi did not say


def _mhz(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def _active(text: str) -> bool | None:
    return {"active": True, "not active": False}.get(text.strip().lower())


def _parse(line: str) -> Gpu | None:
    """One CSV row of QUERY; the name is split off last, since it may hold commas."""
    parts = line.rsplit(",", len(FIELDS) - 1)
    if len(parts) != len(FIELDS):
        return None
    name, driver, sm, mem, max_sm, apps = (x.strip() for x in parts)
    return Gpu(name, driver, _mhz(sm), _mhz(mem), _mhz(max_sm), _active(apps))


def _smi(argv: list[str]) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def nvidia_gpus(only: str | None = None) -> list[Gpu]:
    """Every GPU nvidia-smi lists (or just device `only`, an index or UUID), with its clocks
    where the driver knows the fields (else name and driver only); [] without a driver."""
    sel = [f"--id={only}"] if only else []
    out = _smi(QUERY + sel)
    if out is not None:
        return [gpu for line in out.splitlines() if (gpu := _parse(line))]
    out = _smi(BASIC_QUERY + sel)  # a driver that rejects one of the clock fields
    if out is None:
        return []
    return [Gpu(*(x.strip() for x in line.rsplit(",", 1))) for line in out.splitlines() if "," in line]


def first_visible() -> Gpu | None:
    """The GPU a process here computes on: the first of CUDA_VISIBLE_DEVICES, else device 0."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible in ("-1", "none"):
        return None
    gpus = nvidia_gpus(visible or None)
    return gpus[0] if gpus else None
