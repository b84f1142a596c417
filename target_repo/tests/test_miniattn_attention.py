import pytest
import torch

from miniattn_world import EAGER_MODES, GRAPH_MODES, World


def check(mode, bs, out, ref):
    torch.testing.assert_close(
        out.double().cpu(), ref, rtol=2e-4, atol=2e-4, msg=lambda m: f"mode={mode} bs={bs}: {m}"
    )


@pytest.mark.parametrize("page_size", [1, 4], ids=lambda p: f"page{p}")
@pytest.mark.parametrize("mode", EAGER_MODES)
def test_eager(mode, page_size):
    world = World(mode, page_size=page_size, seed=hash((mode, page_size)) % 1000)
    for bs in (1, 3):
        step = world.make_step(bs)
        world.backend.init_forward_metadata(step.batch)
        out = world.model.forward(step.batch)
        check(mode, bs, out, step.reference)
        world.release(step)


@pytest.mark.parametrize("bs", [1, 3, 4], ids=lambda b: f"bs{b}")
@pytest.mark.parametrize("mode", GRAPH_MODES)
def test_graph_replay(mode, bs):
    """Capture (warm-up runs before any replay wrote the buffers), then replay twice."""
    world = World(mode, page_size=4, seed=100 + bs)
    runner = world.graph_runner(capture_bs=[1, 2, 4])
    for captured, out in runner.warmup_outputs.items():
        assert torch.isfinite(out).all(), f"mode={mode}: warm-up output for bs={captured} is not finite"
    for replay_bs in (bs, 4 if bs != 4 else 2, bs):
        step = world.make_step(replay_bs)
        out = runner.replay(step.batch)
        check(mode, replay_bs, out, step.reference)
        world.release(step)


@pytest.mark.parametrize("mode", GRAPH_MODES)
def test_graph_matches_eager(mode):
    """The same batch through eager metadata and through a replayed graph."""
    world = World(mode, page_size=4, seed=7)
    runner = world.graph_runner(capture_bs=[2, 4])
    step = world.make_step(3)
    graph_out = runner.replay(step.batch).clone()
    world.backend.init_forward_metadata(step.batch)
    eager_out = world.model.forward(step.batch)
    check(mode, 3, graph_out, step.reference)
    torch.testing.assert_close(graph_out, eager_out, rtol=1e-5, atol=1e-5)
