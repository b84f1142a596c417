"""A CPU world around SGLang 0.4.6.post5's FlashAttentionBackend: import bootstrap, fake model runner / pools,
the two CUDA-graph runners mirrored from SGLang (`CudaGraphRunner`, `EAGLEDraftCudaGraphRunner`) without CUDA,
batch builders for every mode, and a reference attention computed from a batch's own description.

CUDA graphs on CPU: "capture" runs the forward with the capture-time metadata (two warm-up runs, as the runners do,
then the run a real graph would record); "replay" writes the replay metadata into the same preallocated buffers and
runs the same forward again with the capture-time ForwardBatch. The stub kernels check the tensors they read, and a
tape (tests/stubs/sgl_kernel/_contract.py) checks that replay hands every kernel the tensors and scalars it was
captured with, as a real graph would.
"""

from __future__ import annotations

import bisect
import importlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch

REPO = Path(__file__).resolve().parents[1]
STUBS = REPO / "tests" / "stubs"
BACKEND_FILE = REPO / "sglang" / "srt" / "layers" / "attention" / "flashattention_backend.py"


def poison_from_env() -> bool:
    """POISON=1: fill uninitialised memory (torch.empty) with NaN / max-int, as perfagent's poison mode does."""
    if os.environ.get("POISON") == "1":
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = True
        return True
    return bool(getattr(torch.utils.deterministic, "fill_uninitialized_memory", False)
                and torch.are_deterministic_algorithms_enabled())


def import_sglang():
    """Import the workspace's flashattention_backend under its real module name, with the installed SGLang around it.

    torch's compiler stack is imported first, while no `triton` is importable, so torch settles on "no Triton" (as
    on any CPU-only machine) before tests/stubs (which holds an import-only Triton stand-in) goes on sys.path.
    """
    import torch._dynamo  # noqa: F401
    import torch._inductor.codecache  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401

    if str(STUBS) not in sys.path:
        sys.path.insert(0, str(STUBS))
    import sglang.srt.layers.attention as pkg  # a namespace package: __path__ is a _NamespacePath (no insert)

    here = str(BACKEND_FILE.parent)
    if list(pkg.__path__)[:1] != [here]:
        pkg.__path__ = [here] + [p for p in pkg.__path__ if p != here]
    fa = importlib.import_module("sglang.srt.layers.attention.flashattention_backend")
    if Path(fa.__file__).resolve() != BACKEND_FILE.resolve():
        raise RuntimeError(f"flashattention_backend imported from {fa.__file__}, expected {BACKEND_FILE}")
    from sglang.srt.configs.model_config import AttentionArch
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
    from sglang.srt.speculative.eagle_utils import EagleDraftInput, EagleVerifyInput

    return SimpleNamespace(fa=fa, AttentionArch=AttentionArch, RadixAttention=RadixAttention,
                           CaptureHiddenMode=CaptureHiddenMode, ForwardBatch=ForwardBatch, ForwardMode=ForwardMode,
                           EagleDraftInput=EagleDraftInput, EagleVerifyInput=EagleVerifyInput)


# --------------------------------------------------------------------------------------------------------------------
# Fakes for what the backend reads from SGLang's model runner


class ReqToTokenPool:
    """SGLang's ReqToTokenPool: req_to_token[req, position] = KV slot (int32, zero-initialised)."""

    def __init__(self, size: int, max_context_len: int):
        self.size = size
        self.max_context_len = max_context_len
        self.req_to_token = torch.zeros((size, max_context_len), dtype=torch.int32)


class KVPool:
    """MHATokenToKVPool's interface: per layer K and V of shape [slots, kv_heads, head_dim], slots = pages*page_size.

    Page 0 (slots 0..page_size-1) is never handed to a request: it is where padded rows write, as in SGLang."""

    def __init__(self, num_pages: int, page_size: int, layers: int, kv_heads: int, head_dim: int):
        self.page_size = page_size
        self.num_pages = num_pages
        self.size = (num_pages - 1) * page_size
        self.k_buffer = [torch.zeros(num_pages * page_size, kv_heads, head_dim) for _ in range(layers)]
        self.v_buffer = [torch.zeros(num_pages * page_size, kv_heads, head_dim) for _ in range(layers)]

    def get_kv_buffer(self, layer_id: int):
        return self.k_buffer[layer_id], self.v_buffer[layer_id]

    def get_key_buffer(self, layer_id: int):
        return self.k_buffer[layer_id]

    def set_kv_buffer(self, layer, loc, cache_k, cache_v, k_scale=None, v_scale=None):
        loc = loc.long()
        self.k_buffer[layer.layer_id][loc] = cache_k.view(loc.numel(), *self.k_buffer[0].shape[1:])
        self.v_buffer[layer.layer_id][loc] = cache_v.view(loc.numel(), *self.v_buffer[0].shape[1:])


class Allocator:
    """Page-aligned slots for requests: position p of a request lives in slot page[p // ps] * ps + p % ps."""

    def __init__(self, pool: ReqToTokenPool, kv: KVPool, gen: torch.Generator):
        self.pool, self.kv, self.gen = pool, kv, gen
        self.reset()

    def reset(self):
        self.free_pages = (torch.randperm(self.kv.num_pages - 1, generator=self.gen) + 1).tolist()
        self.free_reqs = (torch.randperm(self.pool.size - 1, generator=self.gen) + 1).tolist()
        self.pages: dict[int, list[int]] = {}

    def new_req(self) -> int:
        req = self.free_reqs.pop()
        self.pages[req] = []
        return req

    def extend(self, req: int, start: int, n: int) -> torch.Tensor:
        ps = self.kv.page_size
        slots = []
        for p in range(start, start + n):
            while len(self.pages[req]) <= p // ps:
                self.pages[req].append(self.free_pages.pop())
            slots.append(self.pages[req][p // ps] * ps + p % ps)
        t = torch.tensor(slots, dtype=torch.int32)
        self.pool.req_to_token[req, start:start + n] = t
        return t.long()


# --------------------------------------------------------------------------------------------------------------------
# Worlds


@dataclass
class Spec:
    """One configuration the harness runs."""

    mode: str  # decode | local | encdec | draft | verify
    page_size: int = 1
    topk: int = 0  # EAGLE top-k (draft / verify)
    steps: int = 3  # EAGLE speculative_num_steps
    draft_tokens: int = 4  # EAGLE speculative_num_draft_tokens
    chunk: int | None = None  # attention_chunk_size (local attention)
    context_len: int = 128
    capture_bs: tuple = (1, 2, 4)
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    max_reqs: int = 16
    seed: int = 0
    layer_kinds: tuple = ("self", "self")  # "self" | "local" (use_irope) | "cross"

    @property
    def name(self) -> str:
        base = {"draft": f"draft_topk{self.topk}", "verify": f"verify_topk{self.topk}"}.get(self.mode, self.mode)
        return f"{base}[ps{self.page_size}]"


class World:
    def __init__(self, sg, spec: Spec):
        self.sg, self.spec = sg, spec
        self.gen = torch.Generator().manual_seed(spec.seed)
        ps = spec.page_size
        self.pool = ReqToTokenPool(spec.max_reqs, spec.context_len)
        num_pages = 1 + spec.max_reqs * (-(-spec.context_len // ps)) + 8
        self.kv = KVPool(num_pages, ps, len(spec.layer_kinds), spec.kv_heads, spec.head_dim)
        self.alloc = Allocator(self.pool, self.kv, self.gen)
        spec_on = spec.mode in ("draft", "verify")
        self.model_runner = SimpleNamespace(
            model_config=SimpleNamespace(context_len=spec.context_len, is_encoder_decoder=spec.mode == "encdec",
                                         attention_arch=sg.AttentionArch.MHA, hidden_size=spec.heads * spec.head_dim),
            device="cpu",
            req_to_token_pool=self.pool,
            token_to_kv_pool=self.kv,
            kv_cache_dtype=torch.float32,
            dtype=torch.float32,
            page_size=ps,
            sliding_window_size=None,
            server_args=SimpleNamespace(
                kv_cache_dtype="auto",
                speculative_eagle_topk=spec.topk if spec_on else None,
                speculative_num_steps=spec.steps if spec_on else None,
                speculative_num_draft_tokens=spec.draft_tokens if spec_on else None,
            ),
        )
        if spec.chunk is not None:
            self.model_runner.attention_chunk_size = spec.chunk
        self.layers = [
            sg.RadixAttention(num_heads=spec.heads, head_dim=spec.head_dim, scaling=spec.head_dim ** -0.5,
                              num_kv_heads=spec.kv_heads, layer_id=i, use_irope=kind == "local",
                              is_cross_attention=kind == "cross")
            for i, kind in enumerate(spec.layer_kinds)
        ]

    def randint(self, lo: int, hi: int) -> int:
        return int(torch.randint(lo, hi + 1, (1,), generator=self.gen))

    def randn(self, *shape) -> torch.Tensor:
        return torch.randn(*shape, generator=self.gen)

    def write_history(self, slots: torch.Tensor) -> None:
        """K/V of tokens already in the cache (every layer), fresh random values for every batch."""
        if slots.numel() == 0:
            return
        for k, v in zip(self.kv.k_buffer, self.kv.v_buffer):
            k[slots] = self.randn(slots.numel(), *k.shape[1:])
            v[slots] = self.randn(slots.numel(), *v.shape[1:])


# --------------------------------------------------------------------------------------------------------------------
# Phase context for failure messages

CONTEXT: list[str] = []


class Phase:
    def __init__(self, text: str):
        self.text = text

    def __enter__(self):
        CONTEXT.append(self.text)

    def __exit__(self, *exc):
        if exc[0] is None:
            CONTEXT.pop()
        return False


def context() -> str:
    return ", ".join(CONTEXT)


class Mismatch(AssertionError):
    pass


def attention_reference(q: torch.Tensor, k_flat: torch.Tensor, v_flat: torch.Tensor, slots: torch.Tensor,
                        scale: float) -> torch.Tensor:
    """Plain softmax attention of one query row q [heads, dim] over the K/V stored at `slots`."""
    hq, hk = q.shape[0], k_flat.shape[1]
    k = k_flat[slots].float().repeat_interleave(hq // hk, dim=1)
    v = v_flat[slots].float().repeat_interleave(hq // hk, dim=1)
    s = torch.einsum("hd,khd->hk", q.float(), k) * scale
    return torch.einsum("hk,khd->hd", torch.softmax(s, dim=-1), v).reshape(-1)


def compare(out: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    diff = (out - ref).abs()
    bad = ~(diff <= 1e-4 + 1e-4 * ref.abs())
    if bool(bad.any()):
        row = int(bad.nonzero()[0][0])
        raise Mismatch(f"{what}: output row {row} differs from the reference attention "
                       f"(max |diff| {float(diff[row].nan_to_num(float('inf')).max()):.3g}, "
                       f"got {out[row, :3].tolist()}, want {ref[row, :3].tolist()})")


# --------------------------------------------------------------------------------------------------------------------
# Batches


@dataclass
class Batch:
    bs: int
    req_pool_indices: torch.Tensor
    seq_lens: torch.Tensor
    out_cache_loc: torch.Tensor
    positions: torch.Tensor
    q: torch.Tensor  # [layers or steps, tokens, heads, dim]
    k: torch.Tensor
    v: torch.Tensor
    # keys[l][row] = KV slots row attends in layer/step l (the reference's definition of the mode)
    keys: list = field(default_factory=list)
    encoder_lens: torch.Tensor | None = None
    spec_info: object = None

    @property
    def seq_lens_cpu(self):
        return self.seq_lens.cpu()


def make_batch(world: World, bs: int) -> Batch:
    sp, sg = world.spec, world.sg
    world.alloc.reset()
    rtt = world.pool.req_to_token
    n_layers = len(sp.layer_kinds)
    reqs, lens, locs, positions, enc = [], [], [], [], []
    keys: list[list[torch.Tensor]] = []
    if sp.mode in ("decode", "local", "encdec"):
        keys = [[] for _ in range(n_layers)]
        E = world.randint(1, 24) if sp.mode == "encdec" else 0  # the backend supports one encoder length per batch
        long_row = world.randint(0, bs - 1)
        for b in range(bs):
            r = world.alloc.new_req()
            hi = sp.context_len - 28
            L = world.randint(sp.chunk or 1, hi) if (sp.mode == "local" and b == long_row) else world.randint(1, hi)
            if E:
                world.write_history(world.alloc.extend(r, 0, E))
            slots = world.alloc.extend(r, E, L)
            world.write_history(slots[:-1])
            reqs.append(r), lens.append(L), locs.append(slots[-1:]), positions.append(L - 1), enc.append(E)
            dec = rtt[r, E:E + L].long()
            for l, kind in enumerate(sp.layer_kinds):
                if kind == "cross":
                    keys[l].append(rtt[r, :E].long())
                elif kind == "local":
                    start = (L - 1) // sp.chunk * sp.chunk
                    keys[l].append(dec[start:])
                else:
                    keys[l].append(dec)
        n_tok, q_layers = bs, n_layers
    elif sp.mode == "verify":
        ndt = sp.draft_tokens
        keys = [[] for _ in range(n_layers)]
        masks = []
        for b in range(bs):
            r = world.alloc.new_req()
            L = world.randint(1, sp.context_len - ndt)
            world.write_history(world.alloc.extend(r, 0, L))
            draft = world.alloc.extend(r, L, ndt)
            reqs.append(r), lens.append(L), locs.append(draft), positions.extend(range(L, L + ndt))
            # a random draft tree: token 0 is the root, parent[t] < t; token t sees its ancestors and itself
            parent = [-1] + [world.randint(0, t - 1) for t in range(1, ndt)]
            m = torch.zeros(ndt, ndt, dtype=torch.bool)
            for t in range(ndt):
                a = t
                while a >= 0:
                    m[t, a] = True
                    a = parent[a]
            if sp.topk <= 1:
                m = torch.tril(torch.ones(ndt, ndt, dtype=torch.bool))  # topk 1: a chain
            masks.append(torch.cat([torch.ones(ndt, L, dtype=torch.bool), m], dim=1).reshape(-1))
            prefix = rtt[r, :L].long()
            for t in range(ndt):
                row_keys = torch.cat([prefix, draft[m[t]]])
                for l in range(n_layers):
                    keys[l].append(row_keys)
        n_tok, q_layers = bs * ndt, n_layers
        spec_info = sg.EagleVerifyInput(
            draft_token=None, custom_mask=torch.cat(masks), positions=torch.tensor(positions, dtype=torch.int64),
            retrive_index=None, retrive_next_token=None, retrive_next_sibling=None, retrive_cum_len=None,
            draft_token_num=ndt, spec_steps=sp.steps, capture_hidden_mode=sg.CaptureHiddenMode.FULL)
    elif sp.mode == "draft":
        topk, S = max(sp.topk, 1), sp.steps
        per_req = []
        for b in range(bs):
            r = world.alloc.new_req()
            L = world.randint(1, sp.context_len - topk * S)
            world.write_history(world.alloc.extend(r, 0, L))
            # assign_draft_cache_locs: the request's topk*steps draft slots follow its prefix in req_to_token
            draft = world.alloc.extend(r, L, topk * S)
            reqs.append(r), lens.append(L), locs.append(draft), positions.extend([L] * topk)
            per_req.append((r, L))
        ocl = torch.cat(locs)
        # keys[step][row]; the expand part (topk > 1) follows the backend's own cache-loc contract,
        # out_cache_loc.view(steps, -1).T (also used by its non-graph init_forward_metadata)
        expand_map = ocl.view(S, -1).T if topk > 1 else None
        keys = []
        for i in range(S - 1):
            step_keys = []
            for b, (r, L) in enumerate(per_req):
                if topk <= 1:
                    step_keys.append(rtt[r, :L + i + 1].long())
                else:
                    for j in range(topk):
                        step_keys.append(torch.cat([rtt[r, :L].long(), expand_map[b * topk + j, :i + 1]]))
            keys.append(step_keys)
        n_tok, q_layers = bs * topk, S
        spec_info = sg.EagleDraftInput(topk_p=torch.rand(bs, topk, generator=world.gen),
                                       topk_index=torch.randint(0, 100, (bs, topk), generator=world.gen),
                                       hidden_states=world.randn(bs, sp.heads * sp.head_dim))
    else:
        raise ValueError(sp.mode)
    batch = Batch(
        bs=bs,
        req_pool_indices=torch.tensor(reqs, dtype=torch.int64),
        seq_lens=torch.tensor(lens, dtype=torch.int64),
        out_cache_loc=torch.cat(locs),
        positions=torch.tensor(positions, dtype=torch.int64),
        q=world.randn(q_layers, n_tok, sp.heads, sp.head_dim),
        k=world.randn(q_layers, n_tok, sp.kv_heads, sp.head_dim),
        v=world.randn(q_layers, n_tok, sp.kv_heads, sp.head_dim),
        keys=keys,
    )
    if sp.mode == "encdec":
        batch.encoder_lens = torch.tensor(enc, dtype=torch.int32)
    if sp.mode in ("verify", "draft"):
        batch.spec_info = spec_info
    return batch


# --------------------------------------------------------------------------------------------------------------------
# Runners (mirroring sglang/srt/model_executor/cuda_graph_runner.py and speculative/eagle_draft_cuda_graph_runner.py)


class GraphRunner:
    """CudaGraphRunner for normal decode (incl. local attention, encoder-decoder) and EAGLE target verify."""

    def __init__(self, world: World):
        from sgl_kernel._contract import TAPE

        self.TAPE = TAPE
        self.world, sg, sp = world, world.sg, world.spec
        self.backend = sg.fa.FlashAttentionBackend(world.model_runner)
        self.capture_bs = list(sp.capture_bs)
        self.max_bs = max(self.capture_bs)
        self.verify = sp.mode == "verify"
        self.capture_forward_mode = sg.ForwardMode.TARGET_VERIFY if self.verify else sg.ForwardMode.DECODE
        self.num_tokens_per_bs = sp.draft_tokens if self.verify else 1
        self.max_num_token = self.max_bs * self.num_tokens_per_bs
        self.is_encoder_decoder = sp.mode == "encdec"
        with Phase("init_cuda_graph_state"):
            self.backend.init_cuda_graph_state(self.max_num_token)
        self.seq_len_fill_value = self.backend.get_cuda_graph_seq_len_fill_value()
        self.seq_lens_cpu = torch.full((self.max_bs,), self.seq_len_fill_value, dtype=torch.int32)
        self.input_ids = torch.zeros((self.max_num_token,), dtype=torch.int64)
        self.req_pool_indices = torch.zeros((self.max_bs,), dtype=torch.int32)
        self.seq_lens = torch.full((self.max_bs,), self.seq_len_fill_value, dtype=torch.int32)
        self.out_cache_loc = torch.zeros((self.max_num_token,), dtype=torch.int64)
        self.positions = torch.zeros((self.max_num_token,), dtype=torch.int64)
        self.encoder_lens = torch.full((self.max_bs,), 0, dtype=torch.int32) if self.is_encoder_decoder else None
        L = len(sp.layer_kinds)
        # the model's per-layer attention inputs / outputs (graph inputs and outputs)
        self.q = torch.zeros(L, self.max_num_token, sp.heads, sp.head_dim)
        self.k = torch.zeros(L, self.max_num_token, sp.kv_heads, sp.head_dim)
        self.v = torch.zeros(L, self.max_num_token, sp.kv_heads, sp.head_dim)
        self.out = torch.zeros(L, self.max_num_token, sp.heads * sp.head_dim)
        self.graphs = {}

    def get_spec_info(self, num_tokens):
        if not self.verify:
            return None
        sg, sp = self.world.sg, self.world.spec
        return sg.EagleVerifyInput(
            draft_token=None, custom_mask=torch.zeros((num_tokens * sp.context_len), dtype=torch.bool),
            positions=None, retrive_index=None, retrive_next_token=None, retrive_next_sibling=None,
            retrive_cum_len=None, draft_token_num=sp.draft_tokens, spec_steps=sp.steps,
            capture_hidden_mode=sg.CaptureHiddenMode.FULL)

    def forward(self, fb, num_tokens):
        for l, layer in enumerate(self.world.layers):
            with Phase(f"layer {l}" + (" (cross)" if layer.is_cross_attention else " (local)" if layer.use_irope else "")):
                q = self.q[l, :num_tokens]
                if layer.is_cross_attention:
                    o = layer(q, None, None, fb)
                else:
                    o = layer(q, self.k[l, :num_tokens], self.v[l, :num_tokens], fb)
                self.out[l, :num_tokens].copy_(o.view(num_tokens, -1))

    def capture(self):
        for bs in reversed(self.capture_bs):
            self.capture_one_batch_size(bs)

    def capture_one_batch_size(self, bs):
        sg = self.world.sg
        num_tokens = bs * self.num_tokens_per_bs
        req_pool_indices = self.req_pool_indices[:bs]
        seq_lens = self.seq_lens[:bs]
        encoder_lens = self.encoder_lens[:bs] if self.is_encoder_decoder else None
        fb = sg.ForwardBatch(
            forward_mode=self.capture_forward_mode, batch_size=bs, input_ids=self.input_ids[:num_tokens],
            req_pool_indices=req_pool_indices, seq_lens=seq_lens, req_to_token_pool=self.world.pool,
            token_to_kv_pool=self.world.kv, attn_backend=self.backend, out_cache_loc=self.out_cache_loc[:num_tokens],
            seq_lens_sum=seq_lens.sum(), encoder_lens=encoder_lens, return_logprob=False,
            positions=self.positions[:num_tokens], spec_info=self.get_spec_info(num_tokens),
            capture_hidden_mode=sg.CaptureHiddenMode.FULL if self.verify else sg.CaptureHiddenMode.NULL)
        with Phase(f"capture bs={bs} metadata"):
            self.backend.init_forward_metadata_capture_cuda_graph(
                bs, num_tokens, req_pool_indices, seq_lens, encoder_lens, fb.forward_mode, fb.spec_info)
        for w in range(2):
            with Phase(f"capture bs={bs} warm-up run {w + 1}"):
                self.forward(fb, num_tokens)
        with Phase(f"capture bs={bs} graph capture run"):
            tape = self.TAPE.record()
            self.forward(fb, num_tokens)
            self.TAPE.stop()
        self.graphs[bs] = (fb, tape, num_tokens)

    def replay(self, batch: Batch) -> torch.Tensor:
        raw_bs = batch.bs
        raw_num_token = raw_bs * self.num_tokens_per_bs
        bs = self.capture_bs[bisect.bisect_left(self.capture_bs, raw_bs)]
        if bs != raw_bs:
            self.seq_lens.fill_(1)
            self.out_cache_loc.zero_()
        self.req_pool_indices[:raw_bs].copy_(batch.req_pool_indices)
        self.seq_lens[:raw_bs].copy_(batch.seq_lens)
        self.out_cache_loc[:raw_num_token].copy_(batch.out_cache_loc)
        self.positions[:raw_num_token].copy_(batch.positions)
        if bs != raw_bs:
            self.seq_lens_cpu.fill_(1)
        self.seq_lens_cpu[:raw_bs].copy_(batch.seq_lens_cpu)
        if self.is_encoder_decoder:
            self.encoder_lens[:raw_bs].copy_(batch.encoder_lens)
        self.q[:, :raw_num_token].copy_(batch.q)
        self.k[:, :raw_num_token].copy_(batch.k)
        self.v[:, :raw_num_token].copy_(batch.v)
        with Phase(f"replay bs={raw_bs} (graph bs={bs}) metadata"):
            self.backend.init_forward_metadata_replay_cuda_graph(
                bs, self.req_pool_indices, self.seq_lens, int(batch.seq_lens.sum()) + (bs - raw_bs),
                self.encoder_lens, self.capture_forward_mode, batch.spec_info, seq_lens_cpu=self.seq_lens_cpu)
        fb, tape, num_tokens = self.graphs[bs]
        with Phase(f"replay bs={raw_bs} (graph bs={bs}) run"):
            self.TAPE.check(tape)
            self.forward(fb, num_tokens)
            self.TAPE.stop()
            for l, layer in enumerate(self.world.layers):
                ref = torch.stack([
                    attention_reference(batch.q[l, row], self.world.kv.k_buffer[l], self.world.kv.v_buffer[l],
                                        batch.keys[l][row], layer.scaling)
                    for row in range(raw_num_token)])
                compare(self.out[l, :raw_num_token], ref, f"layer {l}")
        return self.out[:, :raw_num_token]


class DraftGraphRunner:
    """EAGLEDraftCudaGraphRunner over FlashAttentionMultiStepBackend (draft decode, topk 1 and topk > 1)."""

    def __init__(self, world: World):
        from sgl_kernel._contract import TAPE

        self.TAPE = TAPE
        self.world, sg, sp = world, world.sg, world.spec
        self.topk, self.speculative_num_steps = sp.topk, sp.steps
        self.backend = sg.fa.FlashAttentionMultiStepBackend(world.model_runner, sp.topk, sp.steps)
        self.capture_bs = list(sp.capture_bs)
        self.num_tokens_per_bs = sp.topk
        self.max_bs = max(self.capture_bs)
        self.max_num_token = self.max_bs * self.num_tokens_per_bs
        with Phase("init_cuda_graph_state"):
            self.backend.init_cuda_graph_state(self.max_num_token)
        self.seq_len_fill_value = self.backend.attn_backends[0].get_cuda_graph_seq_len_fill_value()
        self.seq_lens_cpu = torch.full((self.max_bs,), self.seq_len_fill_value, dtype=torch.int32)
        self.req_pool_indices = torch.zeros((self.max_bs,), dtype=torch.int32)
        self.seq_lens = torch.full((self.max_bs,), self.seq_len_fill_value, dtype=torch.int32)
        self.out_cache_loc = torch.zeros((self.max_num_token * self.speculative_num_steps,), dtype=torch.int64)
        self.positions = torch.zeros((self.max_num_token,), dtype=torch.int64)
        self.topk_p = torch.zeros((self.max_bs, self.topk), dtype=torch.float32)
        self.topk_index = torch.zeros((self.max_bs, self.topk), dtype=torch.int64)
        self.hidden_states = torch.zeros((self.max_bs, sp.heads * sp.head_dim))
        S = sp.steps
        self.q = torch.zeros(S, self.max_num_token, sp.heads, sp.head_dim)
        self.k = torch.zeros(S, self.max_num_token, sp.kv_heads, sp.head_dim)
        self.v = torch.zeros(S, self.max_num_token, sp.kv_heads, sp.head_dim)
        self.out = torch.zeros(S, self.max_num_token, sp.heads * sp.head_dim)
        self.graphs = {}
        self.on_step = None

    def draft_forward(self, fb, num_tokens):
        """EAGLEWorker.draft_forward, with the draft model reduced to its one attention layer."""
        out_cache_loc = fb.out_cache_loc
        layer = self.world.layers[0]
        for i in range(self.speculative_num_steps):
            if i == self.speculative_num_steps - 1:
                break
            out_cache_loc = out_cache_loc.view(fb.batch_size, -1)
            fb.out_cache_loc = out_cache_loc[:, self.topk * i: self.topk * (i + 1)].flatten()
            fb.positions.add_(1)
            fb.attn_backend = self.backend.attn_backends[i]
            with Phase(f"step {i}"):
                o = layer(self.q[i, :num_tokens], self.k[i, :num_tokens], self.v[i, :num_tokens], fb)
                self.out[i, :num_tokens].copy_(o.view(num_tokens, -1))
                if self.on_step is not None:
                    self.on_step(i)

    def run_once(self, fb, num_tokens):
        output_cache_loc_backup = fb.out_cache_loc
        hidden_states_backup = fb.spec_info.hidden_states
        self.draft_forward(fb, num_tokens)
        fb.out_cache_loc = output_cache_loc_backup
        fb.spec_info.hidden_states = hidden_states_backup

    def capture(self):
        for bs in reversed(self.capture_bs):
            self.capture_one_batch_size(bs)

    def capture_one_batch_size(self, num_seqs):
        sg = self.world.sg
        num_tokens = num_seqs * self.num_tokens_per_bs
        req_pool_indices = self.req_pool_indices[:num_seqs]
        seq_lens = self.seq_lens[:num_seqs]
        spec_info = sg.EagleDraftInput(topk_p=self.topk_p[:num_seqs], topk_index=self.topk_index[:num_seqs],
                                       hidden_states=self.hidden_states[:num_seqs])
        fb = sg.ForwardBatch(
            forward_mode=sg.ForwardMode.DECODE, batch_size=num_seqs, input_ids=None,
            req_pool_indices=req_pool_indices, seq_lens=seq_lens, req_to_token_pool=self.world.pool,
            token_to_kv_pool=self.world.kv,
            out_cache_loc=self.out_cache_loc[: num_tokens * self.speculative_num_steps],
            seq_lens_sum=seq_lens.sum(), return_logprob=False, positions=self.positions[:num_tokens],
            spec_info=spec_info, capture_hidden_mode=spec_info.capture_hidden_mode)
        with Phase(f"capture bs={num_seqs} metadata"):
            self.backend.init_forward_metadata_capture_cuda_graph(fb)
        for w in range(2):
            with Phase(f"capture bs={num_seqs} warm-up run {w + 1}"):
                self.run_once(fb, num_tokens)
        with Phase(f"capture bs={num_seqs} graph capture run"):
            tape = self.TAPE.record()
            self.run_once(fb, num_tokens)
            self.TAPE.stop()
        self.graphs[num_seqs] = (fb, tape, num_tokens)

    def replay(self, batch: Batch):
        sg = self.world.sg
        fb_in = sg.ForwardBatch(
            forward_mode=sg.ForwardMode.DECODE, batch_size=batch.bs, input_ids=None,
            req_pool_indices=batch.req_pool_indices, seq_lens=batch.seq_lens, req_to_token_pool=self.world.pool,
            token_to_kv_pool=self.world.kv, attn_backend=self.backend, out_cache_loc=batch.out_cache_loc,
            seq_lens_sum=int(batch.seq_lens.sum()), seq_lens_cpu=batch.seq_lens_cpu, positions=batch.positions,
            spec_info=batch.spec_info, return_logprob=False)
        raw_bs = fb_in.batch_size
        raw_num_token = raw_bs * self.num_tokens_per_bs
        bs = self.capture_bs[bisect.bisect_left(self.capture_bs, raw_bs)]
        if bs != raw_bs:
            self.seq_lens.fill_(1)
            self.out_cache_loc.zero_()
            self.positions.zero_()
        num_tokens = bs * self.num_tokens_per_bs
        self.req_pool_indices[:raw_bs].copy_(fb_in.req_pool_indices)
        self.seq_lens[:raw_bs].copy_(fb_in.seq_lens)
        self.out_cache_loc[: raw_num_token * self.speculative_num_steps].copy_(fb_in.out_cache_loc)
        self.positions[:raw_num_token].copy_(fb_in.positions)
        self.topk_p[:raw_bs].copy_(fb_in.spec_info.topk_p)
        self.topk_index[:raw_bs].copy_(fb_in.spec_info.topk_index)
        self.hidden_states[:raw_bs].copy_(fb_in.spec_info.hidden_states)
        self.q[:, :raw_num_token].copy_(batch.q)
        self.k[:, :raw_num_token].copy_(batch.k)
        self.v[:, :raw_num_token].copy_(batch.v)
        if bs != raw_bs:
            fb_in.batch_size = bs
            fb_in.seq_lens = self.seq_lens[:bs]
            fb_in.req_pool_indices = self.req_pool_indices[:bs]
            fb_in.positions = self.positions[:num_tokens]
        if fb_in.seq_lens_cpu is not None and bs != raw_bs:
            self.seq_lens_cpu.fill_(1)
            self.seq_lens_cpu[:raw_bs].copy_(fb_in.seq_lens_cpu)
            fb_in.seq_lens_cpu = self.seq_lens_cpu[:bs]
        with Phase(f"replay bs={raw_bs} (graph bs={bs}) metadata"):
            self.backend.init_forward_metadata_replay_cuda_graph(fb_in, bs)
        fb, tape, n = self.graphs[bs]
        layer = self.world.layers[0]

        def check_step(i):  # the reference for step i, against the cache as it is at step i
            ref = torch.stack([
                attention_reference(batch.q[i, row], self.world.kv.k_buffer[0], self.world.kv.v_buffer[0],
                                    batch.keys[i][row], layer.scaling)
                for row in range(raw_num_token)])
            compare(self.out[i, :raw_num_token], ref, "layer 0")

        with Phase(f"replay bs={raw_bs} (graph bs={bs}) run"):
            self.on_step = check_step
            try:
                self.TAPE.check(tape)
                self.run_once(fb, n)
                self.TAPE.stop()
            finally:
                self.on_step = None


SPECS = [
    Spec("decode", page_size=1),
    Spec("decode", page_size=4),
    Spec("local", page_size=1, chunk=16, layer_kinds=("local", "self")),
    Spec("local", page_size=4, chunk=16, layer_kinds=("local", "self")),
    Spec("encdec", page_size=1, layer_kinds=("self", "cross")),
    Spec("draft", page_size=1, topk=1, steps=3, draft_tokens=4, layer_kinds=("self",)),
    Spec("draft", page_size=4, topk=1, steps=3, draft_tokens=4, layer_kinds=("self",)),
    Spec("draft", page_size=1, topk=2, steps=3, draft_tokens=4, layer_kinds=("self",)),
    Spec("verify", page_size=1, topk=1, steps=3, draft_tokens=4),
    Spec("verify", page_size=4, topk=1, steps=3, draft_tokens=4),
    Spec("verify", page_size=1, topk=2, steps=3, draft_tokens=4),
]

REPLAY_BATCH_SIZES = (4, 3, 1, 2, 3, 4, 1)  # 3 is padded to the captured 4


def run_spec(sg, spec: Spec) -> None:
    """Build the world, capture every batch size, replay a series of random batches; raise on the first problem."""
    world = World(sg, spec)
    runner = DraftGraphRunner(world) if spec.mode == "draft" else GraphRunner(world)
    runner.capture()
    for bs in REPLAY_BATCH_SIZES:
        batch = make_batch(world, bs)
        runner.replay(batch)
