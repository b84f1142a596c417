import zlib

import pytest
import torch

from miniattn.ops import HAS_FLASH_ATTN, flash_attn_with_kvcache
from miniattn_world import EAGER_MODES, GRAPH_MODES, World


def check(mode, bs, out, ref):
    torch.testing.assert_close(
        out.double().cpu(), ref, rtol=2e-4, atol=2e-4, msg=lambda m: f"mode={mode} bs={bs}: {m}"
    )


@pytest.mark.parametrize("page_size", [1, 4], ids=lambda p: f"page{p}")
@pytest.mark.parametrize("mode", EAGER_MODES)
def test_eager(mode, page_size):
    world = World(mode, page_size=page_size, seed=zlib.crc32(f"{mode}-{page_size}".encode()) % 1000)
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


@pytest.mark.skipif(not (torch.cuda.is_available() and HAS_FLASH_ATTN), reason="needs CUDA and flash-attn")
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_matches_torch_fallback(causal, monkeypatch):
    torch.manual_seed(0)
    dev, dtype = torch.device("cuda"), torch.bfloat16
    page_size, pages, bs = 4, 32, 3
    k_cache = torch.randn(pages, page_size, 2, 64, device=dev, dtype=dtype)
    v_cache = torch.randn(pages, page_size, 2, 64, device=dev, dtype=dtype)
    page_table = torch.randperm(pages - 1, device=dev)[: bs * 8].view(bs, 8).to(torch.int32) + 1
    seqlens = torch.tensor([5, 17, 32], dtype=torch.int32, device=dev)
    cu_q = torch.tensor([0, 1, 4, 6], dtype=torch.int32, device=dev)
    q = torch.randn(6, 4, 64, device=dev, dtype=dtype)
    out, lse = flash_attn_with_kvcache(q, k_cache, v_cache, seqlens, page_table, cu_q, 3, causal=causal,
                                       return_softmax_lse=True)
    monkeypatch.setenv("MINIATTN_DISABLE_FLASH", "1")
    ref, ref_lse = flash_attn_with_kvcache(q, k_cache, v_cache, seqlens, page_table, cu_q, 3, causal=causal,
                                           return_softmax_lse=True)
    torch.testing.assert_close(out.float(), ref.float(), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(lse, ref_lse, rtol=1e-2, atol=1e-2)
