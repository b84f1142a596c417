"""The padding matrix (.ci/gpu_steps.py's `padding_matrix` step copies this into a copy of the target's tests/):
every graph mode at three batch-size classes, each run through the graph runner and eagerly, after the
graphs were captured as at a server's start: captured (4, a graph of its own), padded (3, replayed on
the graph captured for 4) and eager-only (6, beyond the largest graph: the runner cannot take it)."""

import pytest
import torch
from miniattn_world import GRAPH_MODES, World

CLASSES = {"captured": 4, "padded": 3, "eager_only": 6}


@pytest.mark.parametrize("how", ["graph", "eager"])
@pytest.mark.parametrize("size", list(CLASSES))
@pytest.mark.parametrize("mode", GRAPH_MODES)
def test_matrix(mode, size, how):
    bs = CLASSES[size]
    world = World(mode, page_size=4, seed=300 + bs)
    runner = world.graph_runner(capture_bs=[1, 2, 4])
    step = world.make_step(bs)
    if how == "graph" and runner.can_run(step.batch):
        out = runner.replay(step.batch)
    else:
        world.backend.init_forward_metadata(step.batch)
        out = world.model.forward(step.batch)
    torch.testing.assert_close(out.double().cpu(), step.reference, rtol=2e-4, atol=2e-4,
                               msg=lambda m: f"mode={mode} bs={bs} ({size}, {how}): {m}")
