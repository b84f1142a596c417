""".ci/gpu_steps.py's Scale: the dry run's graded bench times fewer calls, to rehearse the steps for less CPU;
a GPU run grades with the bundled task's commands exactly as written."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from agent.task import load_task

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def steps():
    spec = importlib.util.spec_from_file_location("gpu_steps", ROOT / ".ci" / "gpu_steps.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_steps"] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["gpu_steps"]


def test_a_gpu_run_is_as_written(steps, tmp_path):
    gpu = steps.Run(out=tmp_path, work=tmp_path, dry=False, deadline=0).scale
    assert gpu is steps.GPU_SCALE and gpu == steps.Scale()
    assert gpu.bench_repeats is None
    text = steps.graded_task(steps.Run(out=tmp_path, work=tmp_path, dry=False, deadline=0), "g", initcheck=True)\
        .read_text()
    # the bundled task, its tests the graded ones, and nothing else changed (its bench above all)
    task = (ROOT / "tasks" / "cuda-graph-buffers.toml").read_text()
    assert '\ncommand = "python bench/bench_graph_init.py"\n' in task
    assert text == task.replace('repo = "target_repo"', f'repo = "{ROOT / "target_repo"}"').replace(
        'patch = "tasks/reference/cuda-graph-buffers.diff"',
        f'patch = "{ROOT / "tasks" / "reference" / "cuda-graph-buffers.diff"}"').replace(
        'command = "python -m pytest -q -x tests"',
        'command = "python -m pytest -q tests -k \\"graph_matches_eager or bs3 or extend\\""\ntimeout_s = 240'
        "\ninitcheck = true")


def test_the_dry_run_times_fewer_calls(steps, tmp_path):
    task = steps.graded_task(steps.Run(out=tmp_path, work=tmp_path, dry=True, deadline=0), "g", initcheck=False)
    text = task.read_text()
    assert '\ncommand = "python bench/bench_graph_init.py --repeats 5"\n' in text and "initcheck" not in text
    assert "\n[perf]\nmax_pairs = 7\n" in text and load_task(task).spec.perf.max_pairs == 7
    assert 'first_call_metric = "first_call_ms"' in text  # the first call, from the same processes
    assert 'command = "python -m pytest -q tests -k \\"graph_matches_eager or bs3 or extend\\""' in text
