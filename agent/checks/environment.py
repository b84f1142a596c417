"""Where the numbers came from: CPU, GPU and driver, and torch/CUDA/Python as the target sees them.

torch and CUDA versions are probed with the target's own interpreter (the `python` the
check commands run), not the harness's, since that is what the benchmark used.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
from pathlib import Path

from agent.checks.models import Environment
from agent.sandbox import base_env, isolation_mode, run_command

_PROBE = r"""
import json, platform
info = {"python": platform.python_version()}
try:
    import torch
    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
except Exception as e:
    info["torch_error"] = repr(e)
print("PERFAGENT_ENV " + json.dumps(info))
"""


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def gpu_driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def device_name(gpu: str | None) -> str:
    """The device perf runs on, for the lock: the first visible CUDA device, else the CPU."""
    if not gpu:
        return "cpu"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return f"cuda:{visible or '0'}"


def probe(root: Path) -> Environment:
    """Run once per checker, in the baseline workspace."""
    res = run_command(f"python -c {shlex.quote(_PROBE)}", root, timeout_s=120, env=base_env({"PYTHONPATH": str(root)}))
    info: dict = {}
    for line in res.output.splitlines():
        if line.startswith("PERFAGENT_ENV "):
            info = json.loads(line.split(" ", 1)[1])
    gpu = info.get("gpu")
    return Environment(cpu=cpu_model(), cpu_count=os.cpu_count(), gpu=gpu, gpu_driver=gpu_driver() if gpu else None,
                       torch=info.get("torch"), cuda=info.get("cuda"), python=info.get("python"),
                       platform=platform.platform(), isolation=isolation_mode(), device=device_name(gpu))
