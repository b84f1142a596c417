"""Time FlashAttentionBackend.init_cuda_graph_state (SGLang 0.4.6.post5) on CPU.

Configuration: the backend of an EAGLE target worker (topk 4, 8 draft tokens) for a model with chunked local
attention (attention_chunk_size 8192), context length 8192, page size 1, CUDA-graph max batch size 32; the graph
runner calls init_cuda_graph_state(max_bs * draft_tokens) = init_cuda_graph_state(256). With this configuration
all 23 torch.zeros buffers of init_cuda_graph_state are allocated (seven int32 page tables of 256 x 8192, 56 MiB, plus small ones).

One process: the backend is built once, then each timed call is init_cuda_graph_state(256) on a backend whose
previous buffers have been released (untimed), so every call allocates the same buffers from scratch. Large host
allocations are served from fresh mappings (glibc's M_MMAP_THRESHOLD pinned to 1 MiB; otherwise glibc raises its
threshold after the first frees and later calls reuse already-faulted heap memory, which made per-process timings
bimodal), and torch runs single-threaded. Prints the median as {"metric": "init_ms", "value": ..., "unit": "ms"}.

Usage: python bench/bench_init_cuda_graph_state.py [--repeats N] [--warmup N]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def fresh_host_memory() -> None:
    try:
        ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD = 1 MiB (also disables its adaptation)
    except (OSError, AttributeError):
        pass


fresh_host_memory()

import torch  # noqa: E402

import sgl_world  # noqa: E402

CONTEXT_LEN = 8192
PAGE_SIZE = 1
CHUNK = 8192
TOPK = 4
DRAFT_TOKENS = 8
MAX_BS = 32

BUFFER_ATTRS = ("decode_cuda_graph_metadata", "decode_cuda_graph_local_attn_metadata",
                "draft_decode_metadata_topk_normal", "draft_decode_metadata_topk_expand", "target_verify_metadata",
                "target_verify_metadata_topk_normal", "target_verify_metadata_topk_expand", "encoder_metadata")


def build_backend(sg):
    pool = sgl_world.ReqToTokenPool(8, CONTEXT_LEN)
    model_runner = SimpleNamespace(
        model_config=SimpleNamespace(context_len=CONTEXT_LEN, is_encoder_decoder=False,
                                     attention_arch=sg.AttentionArch.MHA),
        device="cpu", req_to_token_pool=pool, token_to_kv_pool=None, kv_cache_dtype=torch.bfloat16,
        page_size=PAGE_SIZE, sliding_window_size=None, attention_chunk_size=CHUNK,
        server_args=SimpleNamespace(kv_cache_dtype="auto", speculative_eagle_topk=TOPK, speculative_num_steps=3,
                                    speculative_num_draft_tokens=DRAFT_TOKENS),
    )
    return sg.fa.FlashAttentionBackend(model_runner)


def release(backend) -> None:
    for name in BUFFER_ATTRS:
        if hasattr(backend, name):
            setattr(backend, name, {})  # reference counting frees the tensors here (no cycles)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=int(os.environ.get("BENCH_REPEATS", 30)))
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    sg = sgl_world.import_sglang()
    backend = build_backend(sg)
    max_num_token = MAX_BS * DRAFT_TOKENS
    times = []
    for i in range(args.warmup + args.repeats):
        release(backend)
        t0 = time.perf_counter()
        backend.init_cuda_graph_state(max_num_token)
        dt = (time.perf_counter() - t0) * 1e3
        if i >= args.warmup:
            times.append(dt)
    release(backend)
    print(json.dumps({"metric": "init_ms", "value": round(statistics.median(times), 6), "unit": "ms",
                      "timer": "wall-clock", "min_ms": round(min(times), 6), "max_ms": round(max(times), 6),
                      "repeats": len(times), "max_num_token": max_num_token}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
