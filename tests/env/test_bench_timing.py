"""The bundled bench's timer (target_repo/bench/_common.py::time_ms), run as the benches run it:
in a fresh interpreter from the bench folder. Wall clock on CPU; CUDA events with the L2
flushed before every sample on a GPU (that test skips without one)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agent.checks.perf import parse_metric

pytestmark = pytest.mark.quiet  # it measures timings: alone under pytest -n

BENCH = Path(__file__).resolve().parents[2] / "target_repo" / "bench"

CPU_SCRIPT = """
import json, time, torch
from _common import emit, time_ms

def spin(ms):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < ms / 1e3:
        pass

times = time_ms(lambda: spin(5), 7, 1, torch.device("cpu"), setup=lambda: time.sleep(0.2))
print("TIMES " + json.dumps(times))
emit("spin_ms", times)
"""

# The same read of a buffer a quarter of L2's size, timed with and without the flush: with it,
# every sample reads from device memory; without, from the L2 the previous sample filled.
CUDA_SCRIPT = """
import json, torch
import _common
from _common import TIMING, emit, time_ms

dev = torch.device("cuda")
l2 = torch.cuda.get_device_properties(dev).L2_cache_size or (40 << 20)
x = torch.ones(l2 // 4 // 4, dtype=torch.float32, device=dev)
out = {}
for flush in (False, True):
    times = time_ms(lambda: x.sum(), 50, 5, dev, flush_l2=flush)
    out[str(flush)] = {"times": times, "timing": dict(TIMING)}
out["flush_bytes"] = _common.l2_flush_buffer(dev).numel()
out["l2"] = l2
print("RESULT " + json.dumps(out))
emit("read_ms", times)
"""


def run_bench_script(script: str) -> str:
    res = subprocess.run([sys.executable, "-c", script], cwd=BENCH, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def tagged(out: str, tag: str):
    return json.loads(next(line for line in out.splitlines() if line.startswith(tag + " ")).split(" ", 1)[1])


@pytest.mark.slow
def test_cpu_wall_clock_times_a_busy_wait():
    out = run_bench_script(CPU_SCRIPT)
    times = tagged(out, "TIMES")
    assert len(times) == 7
    assert min(times) >= 5.0  # the wait itself; perf_counter cannot come in under it
    assert statistics.median(times) < 150  # the 200 ms untimed setup is not in it
    line = json.loads(out.splitlines()[-1])
    assert line == {"metric": "spin_ms", "value": round(min(times), 6), "unit": "ms",
                    "median": round(statistics.median(times), 6), "timer": "wall-clock"}
    assert parse_metric(out, "spin_ms")[:2] == (line["value"], "ms")  # the harness still reads it


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CUDA events and L2 flush)")
def test_cuda_events_with_l2_flushed():
    out = run_bench_script(CUDA_SCRIPT)
    res = tagged(out, "RESULT")
    warm, cold = res["False"], res["True"]
    assert warm["timing"] == {"timer": "cuda-events", "l2_flushed": False}
    assert cold["timing"] == {"timer": "cuda-events", "l2_flushed": True}
    assert res["flush_bytes"] >= res["l2"]
    assert all(t > 0 for t in warm["times"] + cold["times"])
    assert statistics.median(cold["times"]) > statistics.median(warm["times"])  # the flush evicted x
    line = json.loads(out.splitlines()[-1])
    assert (line["metric"], line["unit"], line["timer"], line["l2_flushed"]) == ("read_ms", "ms", "cuda-events", True)
