"""The one GPU probe: which NVIDIA GPUs this machine has, by nvidia-smi (no torch, no CUDA context).

The batch asks how many there are (a GPU task is skipped without one); the checks ask which
one a measurement ran on, for the report and the per-device perf lock.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

QUERY = ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]


@dataclass(frozen=True)
class Gpu:
    name: str
    driver: str


def nvidia_gpus(only: str | None = None) -> list[Gpu]:
    """Every GPU nvidia-smi lists (or just device `only`, an index or UUID); [] without a driver."""
    try:
        out = subprocess.run(QUERY + ([f"--id={only}"] if only else []), capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    return [Gpu(*(x.strip() for x in line.rsplit(",", 1))) for line in out.stdout.splitlines() if "," in line]


def first_visible() -> Gpu | None:
    """The GPU a process here computes on: the first of CUDA_VISIBLE_DEVICES, else device 0."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible in ("-1", "none"):
        return None
    gpus = nvidia_gpus(visible or None)
    return gpus[0] if gpus else None
