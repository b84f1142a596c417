"""Shared bench plumbing: argument parsing, timing (CUDA events and a flushed L2 on GPU, perf_counter on CPU),
JSON-line output, and a random batch builder."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from miniattn import (  # noqa: E402
    AttentionLayer,
    AttentionStack,
    FlashAttentionBackend,
    ForwardBatch,
    ForwardMode,
    PagedKVCache,
    ReqToTokenPool,
    SpecInfo,
    TokenAllocator,
    get_device,
)


def parse_args(description: str, repeats: int, warmup: int) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--repeats", type=int, default=int(os.environ.get("MINIATTN_BENCH_REPEATS", repeats)))
    p.add_argument("--warmup", type=int, default=warmup)
    p.add_argument("--threads", type=int, default=int(os.environ.get("MINIATTN_BENCH_THREADS", 1)))
    args = p.parse_args()
    device = get_device()
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    args.device = device
    return args


def fresh_host_memory() -> None:
    """Serve every large host allocation from a fresh mapping (glibc otherwise adapts its
    mmap threshold, so timings would depend on what earlier iterations freed)."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD = 1 MiB
    except OSError:
        pass


L2_DEFAULT_BYTES = 64 << 20  # when the device does not say how big its L2 is

# How the last `time_ms` timed, for `emit` to print beside the metric (the harness reads only
# "metric", "value" and "unit"; these keys tell a reader what the number means).
TIMING: dict[str, object] = {}

_flush_buffers: dict[torch.device, torch.Tensor] = {}


def l2_flush_buffer(device: torch.device) -> torch.Tensor:
    """A buffer twice the device's L2 (at least 64 MiB), allocated once per device: writing
    all of it evicts whatever the previous call left in L2, so every timed call starts cold
    instead of reading its inputs from a cache warmed by the call before."""
    device = torch.device(device.type, device.index if device.index is not None else torch.cuda.current_device())
    if device not in _flush_buffers:
        l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
        _flush_buffers[device] = torch.empty(max(2 * l2, L2_DEFAULT_BYTES), dtype=torch.uint8, device=device)
    return _flush_buffers[device]


def time_ms(fn, repeats: int, warmup: int, device: torch.device, setup=None, flush_l2: bool = True) -> list[float]:
    """Per-call times in ms after `warmup` untimed calls; `setup` runs untimed before each call.

    On CUDA: CUDA events around each call (host launch overhead and queueing excluded), the L2
    flushed untimed before each call (unless `flush_l2` is False), the device synchronised
    before timing starts. On CPU: wall clock (`perf_counter`)."""
    if device.type == "cuda":
        return _time_cuda(fn, repeats, warmup, device, setup, flush_l2)
    for _ in range(warmup):
        if setup is not None:
            setup()
        fn()
    times = []
    for _ in range(repeats):
        if setup is not None:
            setup()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    TIMING.clear()
    TIMING.update(timer="wall-clock")
    return times


def _time_cuda(fn, repeats: int, warmup: int, device: torch.device, setup, flush_l2: bool) -> list[float]:
    flush = l2_flush_buffer(device) if flush_l2 else None
    for _ in range(warmup):  # the flush too, so its first launch is not in the first sample
        if setup is not None:
            setup()
        if flush is not None:
            flush.zero_()
        fn()
    torch.cuda.synchronize(device)
    times = []
    for _ in range(repeats):
        if setup is not None:
            setup()
        if flush is not None:
            flush.zero_()  # queued before `start`, so it is not timed
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    TIMING.clear()
    TIMING.update(timer="cuda-events", l2_flushed=flush is not None)
    return times


def emit(metric: str, times_ms: list[float]) -> None:
    """The metric line the harness reads (the fastest call: the machine only ever adds time, in
    phases that can last a whole process, so the minimum is the steadiest estimate of the work),
    then the median and how it was timed (extra keys it ignores)."""
    line = {"metric": metric, "value": round(min(times_ms), 6), "unit": "ms",
            "median": round(statistics.median(times_ms), 6), **TIMING}
    print(json.dumps(line), flush=True)


class BenchWorld:
    """A cache filled with random requests, and batches over them for every mode."""

    def __init__(self, device, *, page_size=16, max_context_len=2048, max_reqs=80, layers=2,
                 heads=8, kv_heads=2, head_dim=64, dtype=torch.float32, seed=0, **backend_kwargs):
        self.device = device
        self.gen = torch.Generator().manual_seed(seed)
        self.page_size = page_size
        self.max_context_len = max_context_len
        self.pool = ReqToTokenPool(max_reqs + 1, max_context_len, device)
        num_pages = 1 + max_reqs * (-(-max_context_len // page_size)) + 64
        self.kv = PagedKVCache(num_pages, page_size, layers, kv_heads, head_dim, dtype, device)
        self.alloc = TokenAllocator(self.pool, self.kv, seed=seed)
        self.backend = FlashAttentionBackend(self.pool, self.kv, **backend_kwargs)
        self.model = AttentionStack([
            AttentionLayer(i, heads, kv_heads, head_dim,
                           use_local_attention=backend_kwargs.get("attention_chunk_size") is not None and i == 0,
                           is_cross_attention=backend_kwargs.get("is_encoder_decoder", False) and i == 1)
            for i in range(layers)
        ])
        self.dims = (layers, heads, kv_heads, head_dim, dtype)

    def randint(self, lo, hi):
        return int(torch.randint(lo, hi + 1, (1,), generator=self.gen))

    def batch(self, mode: str, bs: int, extend_len: int = 64) -> ForwardBatch:
        """Fresh requests with random lengths; K/V contents are left as they are (timing only)."""
        layers, heads, kv_heads, head_dim, dtype = self.dims
        be = self.backend
        reqs, seq_lens, locs, enc, ext = [], [], [], [], []
        n_new = {"verify": be.speculative_num_draft_tokens, "extend": extend_len}.get(mode, 1)
        reserve = be.max_encoder_len + self.page_size + n_new + be.speculative_num_steps + 1
        for _ in range(bs):
            r = self.alloc.new_request()
            if be.is_encoder_decoder:
                e = self.randint(1, be.max_encoder_len)
                self.alloc.append(r, e)
                self.alloc.pad_to_page(r)
                enc.append(e)
            prefix = self.randint(1, self.max_context_len - reserve)
            self.alloc.append(r, prefix)
            reqs.append(r)
            if mode == "draft":
                self.alloc.append(r, be.speculative_step_id)
            if mode != "draft" or be.topk == 1:
                locs.append(self.alloc.append(r, n_new))
            seq_lens.append(prefix + 1 if mode == "decode" else prefix + n_new if mode == "extend" else prefix)
            ext.append(n_new)
        kw = {}
        fmode = {"verify": ForwardMode.TARGET_VERIFY, "extend": ForwardMode.EXTEND}.get(mode, ForwardMode.DECODE)
        if mode == "draft":
            loc = None
            if be.topk > 1:
                loc = self.alloc.alloc_slots(bs * be.topk * be.speculative_num_steps).view(bs * be.topk, -1)
                locs = [loc[:, be.speculative_step_id]]
            kw["spec_info"] = SpecInfo(topk=be.topk, draft_token_loc=loc)
        elif mode == "verify":
            kw["spec_info"] = SpecInfo(num_draft_tokens=n_new)
        elif mode == "extend":
            kw.update(extend_seq_lens=torch.tensor(ext, dtype=torch.int32, device=self.device),
                      extend_prefix_lens=torch.tensor([s - n_new for s in seq_lens], dtype=torch.int32,
                                                      device=self.device),
                      extend_seq_lens_cpu=ext, extend_prefix_lens_cpu=[s - n_new for s in seq_lens])
        if be.is_encoder_decoder:
            kw.update(encoder_lens=torch.tensor(enc, dtype=torch.int32, device=self.device), encoder_lens_cpu=enc)
        out_cache_loc = torch.cat(locs)
        n = out_cache_loc.numel()
        seq = torch.tensor(seq_lens, dtype=torch.int64)
        return ForwardBatch(
            forward_mode=fmode, batch_size=bs,
            req_pool_indices=torch.tensor(reqs, dtype=torch.int64, device=self.device),
            seq_lens=seq.to(self.device), seq_lens_cpu=seq, seq_lens_sum=int(seq.sum()),
            out_cache_loc=out_cache_loc,
            q=torch.randn(n, layers, heads, head_dim, generator=self.gen).to(self.device, dtype),
            k=torch.randn(n, layers, kv_heads, head_dim, generator=self.gen).to(self.device, dtype),
            v=torch.randn(n, layers, kv_heads, head_dim, generator=self.gen).to(self.device, dtype),
            req_to_token_pool=self.pool, kv_cache=self.kv, attn_backend=self.backend, **kw,
        )
