"""Capture the model once per batch size, then replay it with new inputs.

Mirrors a production runner: the attention backend's graph state is initialised once; for
every captured batch size (largest first) the metadata is bound, the forward runs eagerly a
couple of times (warm-up: lazy initialisation, allocator pools) and is then captured. On CUDA
that is a `torch.cuda.CUDAGraph`; on CPU the call is recorded and replayed eagerly, which keeps
the same contract (static input buffers, metadata written in place before each replay).

With `PYTORCH_NO_CUDA_MEMORY_CACHING=1` (as under compute-sanitizer's initcheck, where the caching
allocator would hide uninitialised reads) CUDA graphs cannot be captured: capture needs the
caching allocator's private pool. The runner then replays eagerly on CUDA too, as PyTorch's own
inductor does, so the same warm-up and replay paths still run.
"""

from __future__ import annotations

import bisect
import os
from typing import Callable, Optional

import torch

from miniattn.flashattention_backend import FlashAttentionBackend
from miniattn.forward_batch import ForwardBatch, ForwardMode, SpecInfo
from miniattn.kv_cache import PagedKVCache, ReqToTokenPool
from miniattn.model import AttentionStack


class EagerGraph:
    """CPU stand-in for `torch.cuda.CUDAGraph`: records a callable, replays it eagerly."""

    def __init__(self):
        self.fn: Optional[Callable[[], torch.Tensor]] = None
        self.output: Optional[torch.Tensor] = None

    def capture(self, fn: Callable[[], torch.Tensor]) -> torch.Tensor:
        self.fn = fn
        self.output = fn()
        return self.output

    def replay(self) -> None:
        self.output.copy_(self.fn())


class GraphRunner:
    def __init__(
        self,
        model: AttentionStack,
        backend: FlashAttentionBackend,
        req_to_token_pool: ReqToTokenPool,
        kv_cache: PagedKVCache,
        *,
        capture_bs: list[int],
        forward_mode: ForwardMode = ForwardMode.DECODE,
        spec_info: Optional[SpecInfo] = None,
        num_warmup: int = 2,
        seq_len_fill_value: int = 1,
        encoder_len_fill_value: int = 1,
    ):
        self.model = model
        self.backend = backend
        self.pool = req_to_token_pool
        self.kv_cache = kv_cache
        self.device = kv_cache.device
        self.capture_bs = sorted(capture_bs)
        self.max_bs = self.capture_bs[-1]
        self.forward_mode = forward_mode
        self.spec_info = spec_info
        self.num_warmup = num_warmup
        self.seq_len_fill_value = seq_len_fill_value
        self.encoder_len_fill_value = encoder_len_fill_value
        self.use_cuda_graph = self.device.type == "cuda" and os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") != "1"
        self.replays: dict[int, int] = {}  # replays per captured batch size

        if forward_mode.is_target_verify():
            self.num_tokens_per_bs = spec_info.num_draft_tokens
        elif spec_info is not None:
            self.num_tokens_per_bs = spec_info.topk
        else:
            self.num_tokens_per_bs = 1
        self.max_num_tokens = self.max_bs * self.num_tokens_per_bs

        backend.init_cuda_graph_state(self.max_bs, self.max_num_tokens)

        layers = model.layers
        n_layers = len(layers)
        heads, kv_heads, head_dim = layers[0].num_heads, layers[0].num_kv_heads, layers[0].head_dim
        dtype, device = kv_cache.dtype, self.device
        self.req_pool_indices = torch.zeros(self.max_bs, dtype=torch.int64, device=device)
        self.seq_lens = torch.full((self.max_bs,), seq_len_fill_value, dtype=torch.int64, device=device)
        self.seq_lens_cpu = torch.full((self.max_bs,), seq_len_fill_value, dtype=torch.int64)
        self.encoder_lens = torch.full((self.max_bs,), encoder_len_fill_value, dtype=torch.int32, device=device)
        self.encoder_lens_cpu = torch.full((self.max_bs,), encoder_len_fill_value, dtype=torch.int32)
        self.out_cache_loc = torch.zeros(self.max_num_tokens, dtype=torch.int64, device=device)
        self.q = torch.zeros(self.max_num_tokens, n_layers, heads, head_dim, dtype=dtype, device=device)
        self.k = torch.zeros(self.max_num_tokens, n_layers, kv_heads, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros(self.max_num_tokens, n_layers, kv_heads, head_dim, dtype=dtype, device=device)
        self.draft_token_loc = None
        if spec_info is not None and spec_info.topk > 1:
            steps = max(backend.speculative_num_steps, 1)
            self.draft_token_loc = torch.zeros(self.max_num_tokens, steps, dtype=torch.int64, device=device)

        self.graphs: dict[int, object] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        self.warmup_outputs: dict[int, torch.Tensor] = {}
        self.graph_pool = torch.cuda.graph_pool_handle() if self.use_cuda_graph else None
        self.capture()

    # ---------------------------------------------------------------- capture

    def _static_spec_info(self, bs: int) -> Optional[SpecInfo]:
        if self.spec_info is None:
            return None
        loc = self.draft_token_loc[: bs * self.spec_info.topk] if self.draft_token_loc is not None else None
        return SpecInfo(topk=self.spec_info.topk, num_draft_tokens=self.spec_info.num_draft_tokens, draft_token_loc=loc)

    def _static_batch(self, bs: int) -> ForwardBatch:
        n = bs * self.num_tokens_per_bs
        encoder = self.backend.is_encoder_decoder
        return ForwardBatch(
            forward_mode=self.forward_mode,
            batch_size=bs,
            req_pool_indices=self.req_pool_indices[:bs],
            seq_lens=self.seq_lens[:bs],
            seq_lens_cpu=self.seq_lens_cpu[:bs],
            out_cache_loc=self.out_cache_loc[:n],
            q=self.q[:n],
            k=self.k[:n],
            v=self.v[:n],
            req_to_token_pool=self.pool,
            kv_cache=self.kv_cache,
            attn_backend=self.backend,
            seq_lens_sum=int(self.seq_lens_cpu[:bs].sum()),
            encoder_lens=self.encoder_lens[:bs] if encoder else None,
            encoder_lens_cpu=self.encoder_lens_cpu[:bs].tolist() if encoder else None,
            spec_info=self._static_spec_info(bs),
        )

    def capture(self) -> None:
        for bs in reversed(self.capture_bs):
            self.graphs[bs], self.outputs[bs] = self.capture_one_batch_size(bs)

    def capture_one_batch_size(self, bs: int):
        forward_batch = self._static_batch(bs)
        self.backend.init_forward_metadata_capture_cuda_graph(
            bs,
            forward_batch.num_tokens,
            forward_batch.req_pool_indices,
            forward_batch.seq_lens,
            forward_batch.encoder_lens,
            self.forward_mode,
            forward_batch.spec_info,
        )

        def run_once() -> torch.Tensor:
            return self.model.forward(forward_batch)

        if self.use_cuda_graph:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(self.num_warmup):
                    out = run_once()
            torch.cuda.current_stream().wait_stream(stream)
        else:
            for _ in range(self.num_warmup):
                out = run_once()
        self.warmup_outputs[bs] = out.clone()

        if self.use_cuda_graph:
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.graph_pool):
                out = run_once()
            torch.cuda.synchronize()
        else:
            graph = EagerGraph()
            out = graph.capture(run_once)
        return graph, out

    # ---------------------------------------------------------------- replay

    def can_run(self, forward_batch: ForwardBatch) -> bool:
        return forward_batch.batch_size <= self.max_bs

    def replay(self, forward_batch: ForwardBatch) -> torch.Tensor:
        raw_bs = forward_batch.batch_size
        raw_num_tokens = forward_batch.num_tokens
        bs = self.capture_bs[bisect.bisect_left(self.capture_bs, raw_bs)]
        if bs != raw_bs:
            self.seq_lens.fill_(self.seq_len_fill_value)
            self.seq_lens_cpu.fill_(self.seq_len_fill_value)
            self.req_pool_indices.zero_()
            self.out_cache_loc.zero_()
            self.encoder_lens.fill_(self.encoder_len_fill_value)
            self.encoder_lens_cpu.fill_(self.encoder_len_fill_value)
            if self.draft_token_loc is not None:
                self.draft_token_loc.zero_()

        self.req_pool_indices[:raw_bs].copy_(forward_batch.req_pool_indices)
        self.seq_lens[:raw_bs].copy_(forward_batch.seq_lens)
        self.seq_lens_cpu[:raw_bs].copy_(forward_batch.seq_lens_cpu)
        self.out_cache_loc[:raw_num_tokens].copy_(forward_batch.out_cache_loc)
        self.q[:raw_num_tokens].copy_(forward_batch.q)
        self.k[:raw_num_tokens].copy_(forward_batch.k)
        self.v[:raw_num_tokens].copy_(forward_batch.v)
        if self.backend.is_encoder_decoder:
            self.encoder_lens[:raw_bs].copy_(forward_batch.encoder_lens)
            self.encoder_lens_cpu[:raw_bs].copy_(torch.as_tensor(forward_batch.encoder_lens_cpu))
        if self.draft_token_loc is not None:
            loc = forward_batch.spec_info.draft_token_loc
            self.draft_token_loc[: loc.shape[0], : loc.shape[1]].copy_(loc)

        self.backend.init_forward_metadata_replay_cuda_graph(
            bs,
            self.req_pool_indices,
            self.seq_lens,
            int(self.seq_lens_cpu[:bs].sum()),
            self.encoder_lens if self.backend.is_encoder_decoder else None,
            self.forward_mode,
            self._static_spec_info(bs),
            self.seq_lens_cpu,
            self.encoder_lens_cpu if self.backend.is_encoder_decoder else None,
        )
        self.graphs[bs].replay()
        self.replays[bs] = self.replays.get(bs, 0) + 1
        return self.outputs[bs][:raw_num_tokens]
