"""The GPU probe and the environment report, against a fake `nvidia-smi` on PATH (a real
process printing what the driver prints), so it runs on machines without a GPU."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agent.checks.environment import probe
from agent.checks.evaluation import Environment, Evaluation
from agent.checks.render import environment_rows
from agent.env.gpu import Gpu, nvidia_gpus

FULL_ROW = "NVIDIA H100 80GB HBM3, 550.54.15, 1980, 2619, 1980, Active"

# Answers the clock query with `row`; the name-and-driver query always. `reject_clocks`
# plays a driver that does not know one of the clock fields.
FAKE_SMI = """#!/bin/sh
echo "$@" >> "{calls}"
case "$*" in
  *clocks.sm*)
    if [ "{reject_clocks}" = 1 ]; then echo 'Field "clocks.sm" is not a valid field to query.' >&2; exit 2; fi
    echo "{row}" ;;
  *) echo "{name}, {driver}" ;;
esac
"""


def fake_smi(tmp_path: Path, monkeypatch, row: str = FULL_ROW, reject_clocks: bool = False) -> Path:
    """Put a fake nvidia-smi first on PATH; returns the file it logs its arguments to."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    calls = tmp_path / "smi-calls"
    name, driver = [x.strip() for x in row.split(",")[:2]]
    script = bin_dir / "nvidia-smi"
    script.write_text(FAKE_SMI.format(calls=calls, row=row, name=name, driver=driver, reject_clocks=int(reject_clocks)))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return calls


def test_clocks_parsed_from_one_query(tmp_path, monkeypatch):
    calls = fake_smi(tmp_path, monkeypatch)
    assert nvidia_gpus() == [Gpu("NVIDIA H100 80GB HBM3", "550.54.15", 1980, 2619, 1980, True)]
    (argv,) = calls.read_text().splitlines()  # one call for device and clocks
    assert "--format=csv,noheader,nounits" in argv and "clocks.max.sm" in argv


def test_name_with_commas_and_missing_fields(tmp_path, monkeypatch):
    fake_smi(tmp_path, monkeypatch, row="Odd, GPU, 535.1, [N/A], 1593, [N/A], Not Active")
    assert nvidia_gpus("0") == [Gpu("Odd, GPU", "535.1", None, 1593, None, False)]


def test_driver_without_clock_fields_still_names_the_gpu(tmp_path, monkeypatch):
    calls = fake_smi(tmp_path, monkeypatch, reject_clocks=True)
    assert nvidia_gpus() == [Gpu("NVIDIA H100 80GB HBM3", "550.54.15")]
    assert len(calls.read_text().splitlines()) == 2  # the clock query, then the plain one


def test_no_driver_is_no_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi anywhere
    assert nvidia_gpus() == []


@pytest.fixture
def cuda_torch_root(tmp_path: Path) -> Path:
    """A workspace whose `torch` says it is a CUDA build (the probe reads only torch/version.py),
    so the probe asks nvidia-smi as it would on a GPU machine."""
    root = tmp_path / "ws"
    (root / "torch").mkdir(parents=True)
    (root / "torch/__init__.py").write_text("")
    (root / "torch/version.py").write_text('__version__ = "2.5.0+cu124"\ncuda = "12.4"\n')
    return root


def test_probe_records_gpu_clocks_and_cpu(tmp_path, monkeypatch, cuda_torch_root):
    fake_smi(tmp_path, monkeypatch)
    env = probe(cuda_torch_root)
    assert (env.torch, env.cuda, env.device) == ("2.5.0+cu124", "12.4", "cuda:0")
    assert (env.gpu, env.gpu_driver) == ("NVIDIA H100 80GB HBM3", "550.54.15")
    assert (env.gpu_sm_clock_mhz, env.gpu_mem_clock_mhz, env.gpu_max_sm_clock_mhz, env.gpu_clocks_locked) == (
        1980, 2619, 1980, True)
    if Path("/proc/cpuinfo").exists() and "mhz" in Path("/proc/cpuinfo").read_text().lower():
        assert env.cpu_mhz and env.cpu_mhz > 0
    rows = {r.name: r.text for r in environment_rows(Evaluation(verdict="pass", environment=env))}
    assert rows["clocks"].startswith("GPU SM 1980/1980 MHz, memory 2619 MHz (locked)")
    assert "GPU NVIDIA H100 80GB HBM3 (driver 550.54.15)" in rows["environment"]


def test_probe_without_cuda_torch_leaves_gpu_fields_empty(tmp_path, monkeypatch):
    fake_smi(tmp_path, monkeypatch)  # a driver, but the target's torch cannot use it
    root = tmp_path / "plain"
    (root / "torch").mkdir(parents=True)
    (root / "torch/__init__.py").write_text("")
    (root / "torch/version.py").write_text('__version__ = "2.5.0+cpu"\ncuda = None\n')
    env = probe(root)
    assert env.gpu is None and env.gpu_sm_clock_mhz is None and env.gpu_clocks_locked is None
    assert env.device == "cpu"


def test_old_reports_still_load():
    """Reports written before the clock fields existed parse, with the new fields unset."""
    env = Environment.model_validate({"cpu": "x", "gpu": "y", "gpu_driver": "1"})
    assert env.gpu_sm_clock_mhz is None and env.cpu_governor is None
