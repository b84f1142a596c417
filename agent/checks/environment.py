"""Where the numbers came from: CPU, GPU and driver, and torch/CUDA/Python as the target sees them.

torch and CUDA versions are probed with the target's own interpreter (the `python` the
check commands run), not the harness's, since that is what the benchmark used. The GPU
comes from nvidia-smi, and only when that torch is a CUDA build.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
from pathlib import Path

from agent.checks.evaluation import Environment
from agent.env.gpu import first_visible
from agent.env.sandbox import base_env, isolation, run_command

# Reads torch/version.py on its own: importing torch would cost seconds per checker.
_PROBE = r"""
import importlib.util, json, os, platform
info = {"python": platform.python_version()}
spec = importlib.util.find_spec("torch")
if spec is not None and spec.submodule_search_locations:
    path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
    version = importlib.util.spec_from_file_location("_perfagent_torch_version", path)
    module = importlib.util.module_from_spec(version)
    version.loader.exec_module(module)
    info["torch"], info["cuda"] = module.__version__, module.cuda
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
    card = first_visible() if info.get("cuda") else None
    name, driver = (card.name, card.driver) if card else (None, None)
    return Environment(cpu=cpu_model(), cpu_count=os.cpu_count(), gpu=name, gpu_driver=driver,
                       torch=info.get("torch"), cuda=info.get("cuda"), python=info.get("python"),
                       platform=platform.platform(), isolation=isolation().mode, device=device_name(name))
