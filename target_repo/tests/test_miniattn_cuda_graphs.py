"""On CUDA the runner captures real CUDA graphs: a replay runs the captured kernels and never calls
the model's Python forward, which an eager replay (the CPU stand-in) would."""

import os

import pytest
import torch

from miniattn import get_device
from miniattn_world import GRAPH_MODES, World

pytestmark = pytest.mark.skipif(
    get_device().type != "cuda" or os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1",
    reason="needs CUDA with the caching allocator (graphs are replayed eagerly otherwise)",
)


@pytest.mark.parametrize("mode", GRAPH_MODES)
def test_replay_runs_the_captured_graph(mode, monkeypatch):
    world = World(mode, page_size=4, seed=11)
    runner = world.graph_runner(capture_bs=[1, 2, 4])
    assert runner.use_cuda_graph
    assert all(isinstance(g, torch.cuda.CUDAGraph) for g in runner.graphs.values()), runner.graphs

    def python_forward(*args, **kwargs):
        raise AssertionError("replay called the model's Python forward: nothing was captured")

    monkeypatch.setattr(world.model, "forward", python_forward)
    for bs in (3, 4, 1):  # 3 is padded to the captured 4
        step = world.make_step(bs)
        out = runner.replay(step.batch)
        torch.testing.assert_close(out.double().cpu(), step.reference, rtol=2e-4, atol=2e-4,
                                   msg=lambda m: f"mode={mode} bs={bs}: {m}")
        world.release(step)
    assert runner.replays == {4: 2, 1: 1}
