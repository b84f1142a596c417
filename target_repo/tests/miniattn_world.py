"""Test world: random requests laid out in the paged cache, plus a float64 reference.

Every K/V written to the cache is also kept here as a plain per-request tensor, so the
reference never looks at pages, page tables or any metadata the backend builds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

from miniattn import (
    AttentionLayer,
    AttentionStack,
    FlashAttentionBackend,
    ForwardBatch,
    ForwardMode,
    GraphRunner,
    PagedKVCache,
    ReqToTokenPool,
    SpecInfo,
    TokenAllocator,
    get_device,
)

GRAPH_MODES = ["decode", "local", "draft_topk1", "draft_topk2", "verify", "encoder"]
EAGER_MODES = GRAPH_MODES + ["extend", "extend_local", "extend_encoder"]

HEADS, KV_HEADS, HEAD_DIM = 4, 2, 16
MAX_CONTEXT = 64
CHUNK = 8
MAX_ENCODER = 12
SPEC_STEPS, SPEC_STEP_ID, TOPK, NUM_DRAFT = 3, 1, 2, 3


def device() -> torch.device:
    return get_device()


@dataclass
class Step:
    batch: ForwardBatch
    reference: torch.Tensor  # [num_tokens, layers, heads, dim], float64
    reqs: list[int] = field(default_factory=list)
    extra_slots: list[torch.Tensor] = field(default_factory=list)


class World:
    def __init__(self, mode: str, page_size: int = 4, seed: int = 0, max_reqs: int = 24):
        self.mode = mode
        self.page_size = page_size
        self.dev = device()
        self.gen = torch.Generator().manual_seed(seed)
        self.dtype = torch.float32
        self.local = mode in ("local", "extend_local")
        self.encoder = mode in ("encoder", "extend_encoder")
        self.layers = [
            AttentionLayer(0, HEADS, KV_HEADS, HEAD_DIM, use_local_attention=self.local),
            AttentionLayer(1, HEADS, KV_HEADS, HEAD_DIM, is_cross_attention=self.encoder),
        ]
        self.model = AttentionStack(self.layers)
        pages_per_req = -(-MAX_CONTEXT // page_size)
        num_pages = 1 + max_reqs * pages_per_req + 4 * 16 * SPEC_STEPS * TOPK
        self.pool = ReqToTokenPool(max_reqs + 1, MAX_CONTEXT, self.dev)
        self.kv = PagedKVCache(num_pages, page_size, len(self.layers), KV_HEADS, HEAD_DIM, self.dtype, self.dev)
        self.alloc = TokenAllocator(self.pool, self.kv, seed=seed)
        kwargs = {}
        if self.local:
            kwargs["attention_chunk_size"] = CHUNK
        if self.encoder:
            kwargs.update(is_encoder_decoder=True, max_encoder_len=MAX_ENCODER)
        if mode.startswith("draft"):
            kwargs.update(
                topk=TOPK if mode == "draft_topk2" else 1,
                speculative_num_steps=SPEC_STEPS,
                speculative_step_id=SPEC_STEP_ID,
            )
        if mode == "verify":
            kwargs.update(speculative_num_draft_tokens=NUM_DRAFT)
        self.backend = FlashAttentionBackend(self.pool, self.kv, **kwargs)
        # per request, per layer: K/V history in position order (decoder / encoder parts)
        self.hist_k: dict[int, list[torch.Tensor]] = {}
        self.hist_v: dict[int, list[torch.Tensor]] = {}
        self.enc_k: dict[int, list[torch.Tensor]] = {}
        self.enc_v: dict[int, list[torch.Tensor]] = {}

    # ------------------------------------------------------------ helpers

    def randint(self, lo: int, hi: int) -> int:
        return int(torch.randint(lo, hi + 1, (1,), generator=self.gen))

    def randn(self, *shape) -> torch.Tensor:
        return torch.randn(*shape, generator=self.gen, dtype=torch.float64)

    def _write(self, slots: torch.Tensor, n: int):
        """Random K/V for n tokens in every layer; returns per-layer (k, v) float64 lists."""
        ks = [self.randn(n, KV_HEADS, HEAD_DIM) for _ in self.layers]
        vs = [self.randn(n, KV_HEADS, HEAD_DIM) for _ in self.layers]
        for layer_id, (k, v) in enumerate(zip(ks, vs)):
            self.kv.set_kv_buffer(layer_id, slots, k.to(self.dev), v.to(self.dev))
        return ks, vs

    def new_request(self, prefix: int) -> int:
        r = self.alloc.new_request()
        if self.encoder:
            e = self.randint(1, MAX_ENCODER)
            slots = self.alloc.append(r, e)
            self.enc_k[r], self.enc_v[r] = self._write(slots, e)
            self.alloc.pad_to_page(r)
        slots = self.alloc.append(r, prefix)
        self.hist_k[r], self.hist_v[r] = self._write(slots, prefix)
        return r

    def release(self, step: Step) -> None:
        for slots in step.extra_slots:
            self.alloc.free_slots(slots)
        for r in step.reqs:
            self.alloc.free_request(r)
            for d in (self.hist_k, self.hist_v, self.enc_k, self.enc_v):
                d.pop(r, None)

    @staticmethod
    def attend(q, k, v, scale):
        """q [Hq, D] over k/v [L, Hkv, D] in float64."""
        group = q.shape[0] // k.shape[1]
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,lhd->hl", q, k) * scale
        return torch.einsum("hl,lhd->hd", torch.softmax(scores, dim=-1), v)

    # ------------------------------------------------------------ steps

    def make_step(self, bs: int) -> Step:
        mode = self.mode
        if mode in ("extend", "extend_local", "extend_encoder"):
            return self._extend_step(bs)
        if mode == "draft_topk2":
            return self._tree_draft_step(bs)
        if mode == "verify":
            return self._chain_step(bs, NUM_DRAFT, ForwardMode.TARGET_VERIFY, seq_offset=0)
        if mode == "draft_topk1":
            return self._chain_step(bs, 1, ForwardMode.DECODE, seq_offset=SPEC_STEP_ID, draft=True)
        return self._chain_step(bs, 1, ForwardMode.DECODE, seq_offset=0)

    def _inputs(self, n: int):
        q = self.randn(n, len(self.layers), HEADS, HEAD_DIM)
        k = self.randn(n, len(self.layers), KV_HEADS, HEAD_DIM)
        v = self.randn(n, len(self.layers), KV_HEADS, HEAD_DIM)
        return q, k, v

    def _batch(self, mode, reqs, seq_lens, out_cache_loc, q, k, v, **kw) -> ForwardBatch:
        seq_lens_t = torch.tensor(seq_lens, dtype=torch.int64)
        enc = None
        if self.encoder:
            enc = [self.enc_k[r][0].shape[0] for r in reqs]
            kw.update(encoder_lens=torch.tensor(enc, dtype=torch.int32, device=self.dev), encoder_lens_cpu=enc)
        return ForwardBatch(
            forward_mode=mode,
            batch_size=len(reqs),
            req_pool_indices=torch.tensor(reqs, dtype=torch.int64, device=self.dev),
            seq_lens=seq_lens_t.to(self.dev),
            seq_lens_cpu=seq_lens_t,
            seq_lens_sum=sum(seq_lens),
            out_cache_loc=torch.cat(out_cache_loc).to(self.dev),
            q=q.to(self.dev, self.dtype),
            k=k.to(self.dev, self.dtype),
            v=v.to(self.dev, self.dtype),
            req_to_token_pool=self.pool,
            kv_cache=self.kv,
            attn_backend=self.backend,
            **kw,
        )

    def _layer_keys(self, layer_id: int, r: int, new_k, new_v):
        """Keys a query of request r sees in layer `layer_id` (before causal/local limits)."""
        if self.layers[layer_id].is_cross_attention:
            return self.enc_k[r][layer_id], self.enc_v[r][layer_id], False
        return torch.cat([self.hist_k[r][layer_id], new_k]), torch.cat([self.hist_v[r][layer_id], new_v]), True

    def _reference(self, q, k, v, token_req, token_pos, token_last):
        """token_pos: absolute position of each query; keys of the same request up to it."""
        n = q.shape[0]
        ref = torch.zeros(n, len(self.layers), HEADS, HEAD_DIM, dtype=torch.float64)
        for t in range(n):
            r, pos, last = token_req[t], token_pos[t], token_last[t]
            for li, layer in enumerate(self.layers):
                own = [i for i in range(n) if token_req[i] == r and i <= last]
                kk, vv, causal = self._layer_keys(li, r, k[own, li], v[own, li])
                if causal:
                    lo = (pos // CHUNK) * CHUNK if layer.use_local_attention else 0
                    kk, vv = kk[lo : pos + 1], vv[lo : pos + 1]
                ref[t, li] = self.attend(q[t, li], kk, vv, layer.scaling)
        return ref

    def _chain_step(self, bs, n_new, mode, seq_offset, draft=False) -> Step:
        """Decode / draft (topk 1) / verify: n_new tokens per request appended to its row."""
        reqs, seq_lens, locs, token_req, token_pos, token_last = [], [], [], [], [], []
        for _ in range(bs):
            max_prefix = MAX_CONTEXT - n_new - seq_offset - (-(-MAX_ENCODER // self.page_size) * self.page_size)
            prefix = self.randint(1, max_prefix) + seq_offset
            r = self.new_request(prefix)
            reqs.append(r)
            locs.append(self.alloc.append(r, n_new))
            # decode: seq_lens include the new token; draft/verify: the verified length
            seq_lens.append(prefix + 1 if mode.is_decode() and not draft else prefix - seq_offset)
            first = len(token_req)
            for i in range(n_new):
                token_req.append(r)
                token_pos.append(prefix + i)
                token_last.append(first + i)
        q, k, v = self._inputs(len(token_req))
        spec = None
        if draft:
            spec = SpecInfo(topk=1)
        elif mode.is_target_verify():
            spec = SpecInfo(num_draft_tokens=n_new)
        batch = self._batch(mode, reqs, seq_lens, locs, q, k, v, spec_info=spec)
        return Step(batch, self._reference(q, k, v, token_req, token_pos, token_last), reqs)

    def _tree_draft_step(self, bs) -> Step:
        """topk > 1: each branch attends to the prefix plus its own draft tokens 0..step."""
        reqs, seq_lens, prefix_lens = [], [], []
        for _ in range(bs):
            prefix = self.randint(1, MAX_CONTEXT - 1)
            reqs.append(self.new_request(prefix))
            seq_lens.append(prefix)
            prefix_lens.append(prefix)
        n_branches = bs * TOPK
        loc = self.alloc.alloc_slots(n_branches * SPEC_STEPS).view(n_branches, SPEC_STEPS)
        prev = [self._write(loc[:, s], n_branches) for s in range(SPEC_STEP_ID)]
        q, k, v = self._inputs(n_branches)
        ref = torch.zeros(n_branches, len(self.layers), HEADS, HEAD_DIM, dtype=torch.float64)
        for b in range(n_branches):
            r = reqs[b // TOPK]
            for li, layer in enumerate(self.layers):
                kk = torch.cat([self.hist_k[r][li]] + [p[0][li][b : b + 1] for p in prev] + [k[b : b + 1, li]])
                vv = torch.cat([self.hist_v[r][li]] + [p[1][li][b : b + 1] for p in prev] + [v[b : b + 1, li]])
                ref[b, li] = self.attend(q[b, li], kk, vv, layer.scaling)
        spec = SpecInfo(topk=TOPK, draft_token_loc=loc)
        batch = self._batch(ForwardMode.DECODE, reqs, seq_lens, [loc[:, SPEC_STEP_ID]], q, k, v, spec_info=spec)
        return Step(batch, ref, reqs, [loc])

    def _extend_step(self, bs) -> Step:
        reqs, seq_lens, locs, token_req, token_pos, token_last = [], [], [], [], [], []
        ext, pre = [], []
        for _ in range(bs):
            extend = self.randint(1, 13)
            prefix = self.randint(0, MAX_CONTEXT - extend - MAX_ENCODER - self.page_size)
            r = self.new_request(prefix)
            reqs.append(r)
            locs.append(self.alloc.append(r, extend))
            seq_lens.append(prefix + extend)
            ext.append(extend)
            pre.append(prefix)
            first = len(token_req)
            for i in range(extend):
                token_req.append(r)
                token_pos.append(prefix + i)
                token_last.append(first + i)
        q, k, v = self._inputs(len(token_req))
        batch = self._batch(
            ForwardMode.EXTEND, reqs, seq_lens, locs, q, k, v,
            extend_seq_lens=torch.tensor(ext, dtype=torch.int32, device=self.dev),
            extend_prefix_lens=torch.tensor(pre, dtype=torch.int32, device=self.dev),
            extend_seq_lens_cpu=ext,
            extend_prefix_lens_cpu=pre,
        )
        return Step(batch, self._reference(q, k, v, token_req, token_pos, token_last), reqs)

    # ------------------------------------------------------------ graphs

    def graph_runner(self, capture_bs) -> GraphRunner:
        if self.mode == "verify":
            mode, spec = ForwardMode.TARGET_VERIFY, SpecInfo(num_draft_tokens=NUM_DRAFT)
        elif self.mode.startswith("draft"):
            mode, spec = ForwardMode.DECODE, SpecInfo(topk=self.backend.topk)
        else:
            mode, spec = ForwardMode.DECODE, None
        return GraphRunner(
            self.model, self.backend, self.pool, self.kv, capture_bs=capture_bs, forward_mode=mode, spec_info=spec
        )


def poisoned() -> bool:
    return os.environ.get("MINIATTN_POISON", "0") == "1"
