"""Where the numbers came from: CPU, GPU and driver, and torch/CUDA/Python as the target sees them.

torch and CUDA versions are probed with the target's own interpreter (the `python` the
check commands run), not the harness's, since that is what the benchmark used. The GPU and
its clocks come from nvidia-smi, and only when that torch is a CUDA build; the CPU clock and
governor from /sys or /proc. Clocks are read once per checker, not per sample.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
from pathlib import Path

from agent.checks.evaluation import Environment
from agent.env.gpu import first_visible
from agent.env.runners import SANDBOXED, CommandRunner
from agent.env.sandbox import ResourceLimits, SandboxSpec, base_env, isolation

PROBE = Path(__file__).with_name("env_probe.py")  # run from its text: see there why


CPUFREQ = Path("/sys/devices/system/cpu/cpu0/cpufreq")


def _cpuinfo(key: str) -> str | None:
    """The first `key : value` of /proc/cpuinfo (cpu 0's)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def cpu_model() -> str | None:
    return _cpuinfo("model name") or platform.processor() or None


def cpu_mhz() -> float | None:
    """CPU 0's current clock: cpufreq where the kernel exposes it, else /proc/cpuinfo (VMs often
    have no cpufreq; their figure is then the nominal one)."""
    for text, scale in ((_read(CPUFREQ / "scaling_cur_freq"), 1e-3), (_cpuinfo("cpu mhz"), 1.0)):
        try:
            return round(float(text) * scale, 1)
        except (TypeError, ValueError):
            continue
    return None


def cpu_governor() -> str | None:
    """The cpufreq governor: "performance" keeps clocks steady, "powersave"/"schedutil" follow the load."""
    return _read(CPUFREQ / "scaling_governor")


def device_name(gpu: str | None) -> str:
    """The device perf runs on, for the lock: the first visible CUDA device, else the CPU."""
    if not gpu:
        return "cpu"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return f"cuda:{visible or '0'}"


def probe(root: Path, bin_dir: Path | None = None, sandbox: SandboxSpec = SandboxSpec(),
          runner: CommandRunner = SANDBOXED) -> Environment:
    """Run once per checker, in the baseline workspace, with the task's interpreter, in its sandbox."""
    res = runner.run(f"python -c {shlex.quote(PROBE.read_text(encoding='utf-8'))}", root, sandbox=sandbox,
                     timeout_s=120, env=base_env({"PYTHONPATH": str(root)}, bin_dir=bin_dir))
    info: dict = {}
    for line in res.output.splitlines():
        if line.startswith("PERFAGENT_ENV "):
            info = json.loads(line.split(" ", 1)[1])
    card = first_visible() if info.get("cuda") else None
    name = card.name if card else None
    return Environment(cpu=cpu_model(), cpu_count=os.cpu_count(), gpu=name, gpu_driver=card.driver if card else None,
                       torch=info.get("torch"), cuda=info.get("cuda"), python=info.get("python"),
                       platform=platform.platform(), isolation=isolation().mode,
                       limits=ResourceLimits.default().describe() if isolation().mode == "bwrap" else None,
                       device=device_name(name),
                       gpu_sm_clock_mhz=card.sm_clock_mhz if card else None,
                       gpu_mem_clock_mhz=card.mem_clock_mhz if card else None,
                       gpu_max_sm_clock_mhz=card.max_sm_clock_mhz if card else None,
                       gpu_clocks_locked=card.clocks_locked if card else None,
                       cpu_mhz=cpu_mhz(), cpu_governor=cpu_governor())
