"""FlashAttention backend over the paged KV cache.

Eager path: `init_forward_metadata(batch)` builds fresh metadata every step.
CUDA-graph path: `init_cuda_graph_state` preallocates metadata buffers once;
`init_forward_metadata_capture_cuda_graph` binds a metadata object per captured batch size
to (slices of) those buffers; `init_forward_metadata_replay_cuda_graph` writes the next
step's values into them before the graph is replayed.

Supported: extend (prefill, with prefix), decode, chunked local attention (layers with
`use_local_attention`), speculative draft decode (topk == 1, and topk > 1 where each branch
attends to the shared prefix and to its own draft tokens, merged by log-sum-exp), target
verify, and encoder-decoder cross attention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from miniattn.forward_batch import ForwardBatch, ForwardMode, SpecInfo
from miniattn.kv_cache import PagedKVCache, ReqToTokenPool
from miniattn.ops import flash_attn_varlen_func, flash_attn_with_kvcache, merge_state


@dataclass
class LocalAttentionMetadata:
    local_query_start_loc: torch.Tensor = None  # [num_virtual_batches + 1] int32
    local_seqused_k: torch.Tensor = None  # [num_virtual_batches] int32
    local_block_table: torch.Tensor = None  # [num_virtual_batches, pages] int32
    local_max_query_len: int = 1
    local_max_seq_len: int = 0


@dataclass
class FlashAttentionMetadata:
    cache_seqlens_int32: torch.Tensor = None  # [bs] key length per sequence
    max_seq_len_q: int = 1
    max_seq_len_k: int = 0
    cu_seqlens_q: torch.Tensor = None  # [bs + 1]
    cu_seqlens_k: torch.Tensor = None  # [bs + 1]
    page_table: torch.Tensor = None  # [bs, pages]
    # encoder-decoder (cross attention)
    encoder_lens_int32: torch.Tensor = None
    encoder_max_seq_len_k: int = 0
    encoder_cu_seqlens_k: torch.Tensor = None
    encoder_page_table: torch.Tensor = None
    # chunked local attention
    local_attn_metadata: Optional[LocalAttentionMetadata] = None


class FlashAttentionBackend:
    def __init__(
        self,
        req_to_token_pool: ReqToTokenPool,
        kv_cache: PagedKVCache,
        *,
        attention_chunk_size: Optional[int] = None,
        topk: int = 1,
        speculative_num_steps: int = 0,
        speculative_step_id: int = 0,
        speculative_num_draft_tokens: int = 0,
        is_encoder_decoder: bool = False,
        max_encoder_len: int = 0,
    ):
        self.req_to_token = req_to_token_pool.req_to_token
        self.max_context_len = req_to_token_pool.max_context_len
        self.page_size = kv_cache.page_size
        self.device = kv_cache.device
        self.attention_chunk_size = attention_chunk_size
        if attention_chunk_size is not None and attention_chunk_size % self.page_size:
            raise ValueError("attention_chunk_size must be a multiple of the page size")
        self.topk = topk
        self.speculative_num_steps = speculative_num_steps
        self.speculative_step_id = speculative_step_id
        self.speculative_num_draft_tokens = speculative_num_draft_tokens
        self.is_encoder_decoder = is_encoder_decoder
        self.max_encoder_len = max_encoder_len
        self.forward_metadata: Optional[FlashAttentionMetadata] = None
        self.forward_metadata_spec_decode_expand: Optional[FlashAttentionMetadata] = None

    # ------------------------------------------------------------------ helpers

    def _build_page_table(self, req_pool_indices, lens, starts=None):
        """Row i: the pages holding positions [starts[i], starts[i] + lens[i]) of request i."""
        ps = self.page_size
        reqs = req_pool_indices.tolist()
        lens = lens.tolist()
        starts = starts.tolist() if starts is not None else [0] * len(reqs)
        max_pages = max([(n + ps - 1) // ps for n in lens] + [1])
        page_table = torch.zeros((len(reqs), max_pages), dtype=torch.int32, device=self.device)
        for i, (r, n, s) in enumerate(zip(reqs, lens, starts)):
            if n > 0:
                page_table[i, : (n + ps - 1) // ps] = self.req_to_token[r, s : s + n : ps] // ps
        return page_table

    def _fill_page_table(self, out, req_pool_indices, max_seq_len, starts=None):
        """Write the first pages of each row of `out` (CUDA-graph buffers)."""
        ps = self.page_size
        max_seq_pages = (max_seq_len + ps - 1) // ps
        cols = torch.arange(0, max_seq_pages * ps, ps, device=self.device)[None, :]
        if starts is not None:
            cols = (cols + starts[:, None]).clamp_(max=self.max_context_len - 1)
        page_indices = self.req_to_token[req_pool_indices[:, None], cols]
        out[:, :max_seq_pages].copy_(page_indices // ps)

    def _decoder_starts(self, encoder_lens):
        ps = self.page_size
        return (encoder_lens.to(torch.int64) + ps - 1) // ps * ps

    # ------------------------------------------------------------ eager metadata

    def init_forward_metadata(self, forward_batch: ForwardBatch) -> None:
        fb = forward_batch
        md = FlashAttentionMetadata()
        bs = fb.batch_size
        device = self.device
        seqlens_in_batch = fb.seq_lens
        starts = self._decoder_starts(fb.encoder_lens) if self.is_encoder_decoder else None

        if fb.forward_mode.is_decode():
            if fb.spec_info is not None:
                if self.topk <= 1:
                    md.cache_seqlens_int32 = (seqlens_in_batch + (self.speculative_step_id + 1)).to(torch.int32)
                    md.max_seq_len_k = int(md.cache_seqlens_int32.max().item())
                    md.cu_seqlens_q = torch.arange(0, bs + 1, dtype=torch.int32, device=device)
                    md.cu_seqlens_k = F.pad(torch.cumsum(md.cache_seqlens_int32, dim=0, dtype=torch.int32), (1, 0))
                    md.page_table = self._build_page_table(fb.req_pool_indices, md.cache_seqlens_int32)
                else:
                    md.cache_seqlens_int32 = seqlens_in_batch.to(torch.int32)
                    md.max_seq_len_q = self.topk
                    md.max_seq_len_k = int(seqlens_in_batch.max().item())
                    md.cu_seqlens_q = torch.arange(0, bs * self.topk + 1, step=self.topk, dtype=torch.int32, device=device)
                    md.cu_seqlens_k = F.pad(torch.cumsum(md.cache_seqlens_int32, dim=0, dtype=torch.int32), (1, 0))
                    md.page_table = self._build_page_table(fb.req_pool_indices, md.cache_seqlens_int32)

                    decode_length = self.speculative_step_id + 1
                    me = FlashAttentionMetadata()
                    me.cache_seqlens_int32 = torch.full((bs * self.topk,), decode_length, dtype=torch.int32, device=device)
                    me.max_seq_len_q = 1
                    me.max_seq_len_k = decode_length
                    me.cu_seqlens_q = torch.arange(0, bs * self.topk + 1, dtype=torch.int32, device=device)
                    me.cu_seqlens_k = torch.arange(0, bs * self.topk + 1, dtype=torch.int32, device=device) * decode_length
                    me.page_table = fb.spec_info.draft_token_loc[:, :decode_length].to(torch.int32)
                    self.forward_metadata_spec_decode_expand = me
            else:
                md.cache_seqlens_int32 = seqlens_in_batch.to(torch.int32)
                md.max_seq_len_k = int(seqlens_in_batch.max().item())
                md.cu_seqlens_q = torch.arange(0, bs + 1, dtype=torch.int32, device=device)
                md.cu_seqlens_k = F.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
                md.page_table = self._build_page_table(fb.req_pool_indices, md.cache_seqlens_int32, starts)
        elif fb.forward_mode.is_target_verify():
            n = self.speculative_num_draft_tokens
            md.cache_seqlens_int32 = (seqlens_in_batch + n).to(torch.int32)
            md.max_seq_len_q = n
            md.max_seq_len_k = int(md.cache_seqlens_int32.max().item())
            md.cu_seqlens_q = torch.arange(0, bs * n + 1, step=n, dtype=torch.int32, device=device)
            md.cu_seqlens_k = F.pad(torch.cumsum(md.cache_seqlens_int32, dim=0, dtype=torch.int32), (1, 0))
            md.page_table = self._build_page_table(fb.req_pool_indices, md.cache_seqlens_int32)
        else:
            md.cache_seqlens_int32 = seqlens_in_batch.to(torch.int32)
            md.max_seq_len_k = int(seqlens_in_batch.max().item())
            md.cu_seqlens_k = F.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
            md.page_table = self._build_page_table(fb.req_pool_indices, md.cache_seqlens_int32, starts)
            md.max_seq_len_q = int(fb.extend_seq_lens.max().item())
            md.cu_seqlens_q = F.pad(torch.cumsum(fb.extend_seq_lens, dim=0, dtype=torch.int32), (1, 0))

        if self.is_encoder_decoder:
            md.encoder_lens_int32 = fb.encoder_lens.to(torch.int32)
            md.encoder_max_seq_len_k = int(md.encoder_lens_int32.max().item())
            md.encoder_cu_seqlens_k = F.pad(torch.cumsum(md.encoder_lens_int32, dim=0, dtype=torch.int32), (1, 0))
            md.encoder_page_table = self._build_page_table(fb.req_pool_indices, md.encoder_lens_int32)

        if self.attention_chunk_size is not None and fb.spec_info is None and not fb.forward_mode.is_target_verify():
            self._init_local_attn_metadata(md, fb)

        self.forward_metadata = md

    def _init_local_attn_metadata(self, md: FlashAttentionMetadata, fb: ForwardBatch) -> None:
        """Split every sequence's queries into virtual batches, one per attention chunk."""
        chunk = self.attention_chunk_size
        seq_lens = fb.seq_lens_cpu.tolist()
        q_lens = [1] * len(seq_lens) if fb.forward_mode.is_decode() else list(fb.extend_seq_lens_cpu)
        vb_req, vb_start, vb_q, vb_k = [], [], [], []
        for i, (total, n_q) in enumerate(zip(seq_lens, q_lens)):
            c = (total - n_q) // chunk
            while c * chunk < total:
                lo, hi = max(total - n_q, c * chunk), min(total, (c + 1) * chunk)
                vb_req.append(i)
                vb_start.append(c * chunk)
                vb_q.append(hi - lo)
                vb_k.append(hi - c * chunk)
                c += 1
        device = self.device
        q_lens_t = torch.tensor(vb_q, dtype=torch.int32, device=device)
        k_lens_t = torch.tensor(vb_k, dtype=torch.int32, device=device)
        req_t = fb.req_pool_indices[torch.tensor(vb_req, dtype=torch.int64, device=device)]
        md.local_attn_metadata = LocalAttentionMetadata(
            local_query_start_loc=F.pad(torch.cumsum(q_lens_t, dim=0, dtype=torch.int32), (1, 0)),
            local_seqused_k=k_lens_t,
            local_block_table=self._build_page_table(req_t, k_lens_t, torch.tensor(vb_start, device=device)),
            local_max_query_len=max(vb_q),
            local_max_seq_len=max(vb_k),
        )

    # ------------------------------------------------------------ CUDA graphs

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int) -> None:
        device = self.device
        max_pages = (self.max_context_len + self.page_size - 1) // self.page_size
        self.decode_cuda_graph_metadata = {
            "cache_seqlens": torch.zeros(max_bs, dtype=torch.int32, device=device),
            "cu_seqlens_q": torch.arange(0, max_bs + 1, dtype=torch.int32, device=device),
            "cu_seqlens_k": torch.zeros(max_bs + 1, dtype=torch.int32, device=device),
            "page_table": torch.zeros(max_bs, max_pages, dtype=torch.int32, device=device),
            "page_table_draft_decode": torch.zeros(max_bs, max_pages, dtype=torch.int32, device=device),
        }

        if self.attention_chunk_size is not None:
            pages_per_chunk = self.attention_chunk_size // self.page_size
            self.decode_cuda_graph_local_attn_metadata = {
                "local_query_start_loc": torch.zeros(max_bs + 1, dtype=torch.int32, device=device),
                "local_seqused_k": torch.zeros(max_bs, dtype=torch.int32, device=device),
                "local_block_table": torch.zeros(max_bs, pages_per_chunk, dtype=torch.int32, device=device),
            }

        if self.topk > 1:
            self.draft_decode_metadata_topk_normal = {
                "cache_seqlens": torch.zeros(max_bs, dtype=torch.int32, device=device),
                "cu_seqlens_q": torch.arange(0, max_bs * self.topk + 1, step=self.topk, dtype=torch.int32, device=device),
                "cu_seqlens_k": torch.zeros(max_bs + 1, dtype=torch.int32, device=device),
                "page_table": torch.zeros(max_bs, max_pages, dtype=torch.int32, device=device),
            }
            max_expand = max(max_num_tokens, max_bs * self.topk)
            self.draft_decode_metadata_topk_expand = {
                "cache_seqlens": torch.zeros(max_expand, dtype=torch.int32, device=device),
                "cu_seqlens_q": torch.arange(0, max_expand + 1, dtype=torch.int32, device=device),
                "page_table": torch.zeros(max_expand, max(self.speculative_num_steps, 1), dtype=torch.int32, device=device),
            }

        if self.speculative_num_draft_tokens > 0:
            n = self.speculative_num_draft_tokens
            self.target_verify_metadata = {
                "cache_seqlens": torch.zeros(max_bs, dtype=torch.int32, device=device),
                "cu_seqlens_q": torch.arange(0, max_bs * n + 1, step=n, dtype=torch.int32, device=device),
                "cu_seqlens_k": torch.zeros(max_bs + 1, dtype=torch.int32, device=device),
                "page_table": torch.zeros(max_bs, max_pages, dtype=torch.int32, device=device),
            }

        if self.is_encoder_decoder:
            max_encoder_pages = max((self.max_encoder_len + self.page_size - 1) // self.page_size, 1)
            self.encoder_metadata = {
                "encoder_page_table": torch.zeros(max_bs, max_encoder_pages, dtype=torch.int32, device=device),
                "encoder_lens_int32": torch.zeros(max_bs, dtype=torch.int32, device=device),
                "encoder_cu_seqlens_k": torch.zeros(max_bs + 1, dtype=torch.int32, device=device),
            }

    def init_forward_metadata_capture_cuda_graph(
        self,
        bs: int,
        num_tokens: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        encoder_lens: Optional[torch.Tensor],
        forward_mode: ForwardMode,
        spec_info: Optional[SpecInfo],
    ) -> None:
        md = FlashAttentionMetadata()
        if forward_mode.is_decode():
            if spec_info is not None:
                if self.topk <= 1:
                    bufs = self.decode_cuda_graph_metadata
                    md.cache_seqlens_int32 = bufs["cache_seqlens"][:bs]
                    md.cache_seqlens_int32.copy_(seq_lens + (self.speculative_step_id + 1))
                    md.max_seq_len_k = int(seq_lens.max().item()) + self.speculative_step_id + 1
                    md.cu_seqlens_q = bufs["cu_seqlens_q"][: bs + 1]
                    md.cu_seqlens_k = bufs["cu_seqlens_k"][: bs + 1]
                    md.cu_seqlens_k.copy_(F.pad(torch.cumsum(md.cache_seqlens_int32, dim=0, dtype=torch.int32), (1, 0)))
                    md.page_table = bufs["page_table_draft_decode"][:bs]
                    self._fill_page_table(md.page_table, req_pool_indices, md.max_seq_len_k)
                    self.decode_cuda_graph_metadata[bs] = md
                else:
                    bufs = self.draft_decode_metadata_topk_normal
                    md.cache_seqlens_int32 = bufs["cache_seqlens"][:bs]
                    md.cache_seqlens_int32.copy_(seq_lens)
                    md.max_seq_len_q = self.topk
                    md.max_seq_len_k = int(seq_lens.max().item())
                    md.cu_seqlens_q = bufs["cu_seqlens_q"][: bs + 1]
                    md.cu_seqlens_k = bufs["cu_seqlens_k"][: bs + 1]
                    md.cu_seqlens_k.copy_(F.pad(torch.cumsum(md.cache_seqlens_int32, dim=0, dtype=torch.int32), (1, 0)))
                    md.page_table = bufs["page_table"][req_pool_indices, :]
                    self.draft_decode_metadata_topk_normal[bs] = md

                    decode_length = self.speculative_step_id + 1
                    ebufs = self.draft_decode_metadata_topk_expand
                    me = FlashAttentionMetadata()
                    me.cache_seqlens_int32 = ebufs["cache_seqlens"][: bs * self.topk]
                    me.cache_seqlens_int32.fill_(decode_length)
                    me.max_seq_len_q = 1
                    me.max_seq_len_k = decode_length
                    me.cu_seqlens_q = ebufs["cu_seqlens_q"][: bs * self.topk + 1]
                    me.page_table = ebufs["page_table"][: bs * self.topk]
                    self.draft_decode_metadata_topk_expand[bs] = me
                    self.forward_metadata_spec_decode_expand = me
            else:
                bufs = self.decode_cuda_graph_metadata
                md.cache_seqlens_int32 = bufs["cache_seqlens"][:bs]
                md.cache_seqlens_int32.copy_(seq_lens)
                md.max_seq_len_k = int(seq_lens.max().item())
                md.cu_seqlens_q = bufs["cu_seqlens_q"][: bs + 1]
                md.cu_seqlens_k = bufs["cu_seqlens_k"][: bs + 1]
                md.cu_seqlens_k.copy_(F.pad(torch.cumsum(seq_lens, dim=0, dtype=torch.int32), (1, 0)))
                md.page_table = bufs["page_table"][req_pool_indices, :]
                if self.attention_chunk_size is not None:
                    lbufs = self.decode_cuda_graph_local_attn_metadata
                    md.local_attn_metadata = LocalAttentionMetadata(
                        local_query_start_loc=lbufs["local_query_start_loc"][: bs + 1],
                        local_seqused_k=lbufs["local_seqused_k"][:bs],
                        local_block_table=lbufs["local_block_table"][:bs],
                        local_max_query_len=1,
                        local_max_seq_len=self.attention_chunk_size,
                    )
                    self._update_local_attn_metadata_for_replay(md, bs, req_pool_indices, seq_lens)
                self.decode_cuda_graph_metadata[bs] = md
        elif forward_mode.is_target_verify():
            n = self.speculative_num_draft_tokens
            bufs = self.target_verify_metadata
            md.cache_seqlens_int32 = bufs["cache_seqlens"][:bs]
            md.cache_seqlens_int32.copy_(seq_lens + n)
            md.max_seq_len_q = n
            md.max_seq_len_k = int(seq_lens.max().item()) + n
            md.cu_seqlens_q = bufs["cu_seqlens_q"][: bs + 1]
            md.cu_seqlens_k = bufs["cu_seqlens_k"][: bs + 1]
            md.cu_seqlens_k[1:].copy_(torch.cumsum(md.cache_seqlens_int32, dim=0, dtype=torch.int32))
            md.page_table = bufs["page_table"][:bs]
            self._fill_page_table(md.page_table, req_pool_indices, md.max_seq_len_k)
            self.target_verify_metadata[bs] = md
        else:
            raise ValueError(f"CUDA graphs are not supported for {forward_mode!r}")

        if self.is_encoder_decoder:
            ebufs = self.encoder_metadata
            md.encoder_lens_int32 = ebufs["encoder_lens_int32"][:bs]
            md.encoder_lens_int32.copy_(encoder_lens)
            md.encoder_cu_seqlens_k = ebufs["encoder_cu_seqlens_k"][: bs + 1]
            md.encoder_cu_seqlens_k[1:].copy_(torch.cumsum(md.encoder_lens_int32, dim=0, dtype=torch.int32))
            md.encoder_max_seq_len_k = int(encoder_lens.max().item())
            md.encoder_page_table = ebufs["encoder_page_table"][:bs]
            self._fill_page_table(md.encoder_page_table, req_pool_indices, md.encoder_max_seq_len_k)

        self.forward_metadata = md

    def init_forward_metadata_replay_cuda_graph(
        self,
        bs: int,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_sum: int,
        encoder_lens: Optional[torch.Tensor],
        forward_mode: ForwardMode,
        spec_info: Optional[SpecInfo],
        seq_lens_cpu: torch.Tensor,
        encoder_lens_cpu: Optional[torch.Tensor] = None,
    ) -> None:
        seq_lens = seq_lens[:bs]
        seq_lens_cpu = seq_lens_cpu[:bs]
        req_pool_indices = req_pool_indices[:bs]
        if forward_mode.is_decode():
            if spec_info is not None:
                if self.topk <= 1:
                    md = self.decode_cuda_graph_metadata[bs]
                    md.cache_seqlens_int32.copy_(seq_lens + (self.speculative_step_id + 1))
                    md.cu_seqlens_q.copy_(torch.arange(0, bs + 1, dtype=torch.int32, device=self.device))
                    md.max_seq_len_k = int(seq_lens_cpu.max().item()) + self.speculative_step_id + 1
                    md.cu_seqlens_k.copy_(F.pad(torch.cumsum(md.cache_seqlens_int32, dim=0, dtype=torch.int32), (1, 0)))
                    self._fill_page_table(md.page_table, req_pool_indices, md.max_seq_len_k)
                else:
                    md = self.draft_decode_metadata_topk_normal[bs]
                    md.cache_seqlens_int32.copy_(seq_lens)
                    md.cu_seqlens_q.copy_(
                        torch.arange(0, bs * self.topk + 1, step=self.topk, dtype=torch.int32, device=self.device)
                    )
                    md.max_seq_len_k = int(seq_lens_cpu.max().item())
                    md.cu_seqlens_k.copy_(F.pad(torch.cumsum(md.cache_seqlens_int32, dim=0, dtype=torch.int32), (1, 0)))
                    self._fill_page_table(md.page_table, req_pool_indices, md.max_seq_len_k)

                    decode_length = self.speculative_step_id + 1
                    me = self.draft_decode_metadata_topk_expand[bs]
                    me.cu_seqlens_q.copy_(torch.arange(0, bs * self.topk + 1, dtype=torch.int32, device=self.device))
                    me.page_table[:, :decode_length].copy_(spec_info.draft_token_loc[: bs * self.topk, :decode_length])
                    self.forward_metadata_spec_decode_expand = me
            else:
                md = self.decode_cuda_graph_metadata[bs]
                md.cache_seqlens_int32.copy_(seq_lens)
                md.cu_seqlens_q.copy_(torch.arange(0, bs + 1, dtype=torch.int32, device=self.device))
                md.max_seq_len_k = int(seq_lens_cpu.max().item())
                md.cu_seqlens_k.copy_(F.pad(torch.cumsum(seq_lens, dim=0, dtype=torch.int32), (1, 0)))
                starts = self._decoder_starts(encoder_lens[:bs]) if self.is_encoder_decoder else None
                self._fill_page_table(md.page_table, req_pool_indices, md.max_seq_len_k, starts)
                if self.attention_chunk_size is not None:
                    self._update_local_attn_metadata_for_replay(md, bs, req_pool_indices, seq_lens)
        elif forward_mode.is_target_verify():
            n = self.speculative_num_draft_tokens
            md = self.target_verify_metadata[bs]
            md.cache_seqlens_int32.copy_(seq_lens + n)
            md.cu_seqlens_q.copy_(torch.arange(0, bs * n + 1, step=n, dtype=torch.int32, device=self.device))
            md.max_seq_len_k = int(seq_lens_cpu.max().item()) + n
            md.cu_seqlens_k[1:].copy_(torch.cumsum(md.cache_seqlens_int32, dim=0, dtype=torch.int32))
            self._fill_page_table(md.page_table, req_pool_indices, md.max_seq_len_k)
        else:
            raise ValueError(f"CUDA graphs are not supported for {forward_mode!r}")

        if self.is_encoder_decoder:
            encoder_lens = encoder_lens[:bs]
            md.encoder_lens_int32.copy_(encoder_lens)
            md.encoder_cu_seqlens_k[1:].copy_(torch.cumsum(md.encoder_lens_int32, dim=0, dtype=torch.int32))
            md.encoder_max_seq_len_k = int(encoder_lens_cpu[:bs].max().item())
            self._fill_page_table(md.encoder_page_table, req_pool_indices, md.encoder_max_seq_len_k)

        self.forward_metadata = md

    def _update_local_attn_metadata_for_replay(self, md, bs, req_pool_indices, seq_lens) -> None:
        """Decode: each sequence is one virtual batch, from its current chunk's start."""
        lm = md.local_attn_metadata
        chunk, ps = self.attention_chunk_size, self.page_size
        local_start = torch.div(seq_lens - 1, chunk, rounding_mode="floor") * chunk
        lm.local_seqused_k.copy_(seq_lens - local_start)
        lm.local_query_start_loc[1:].copy_(torch.arange(1, bs + 1, dtype=torch.int32, device=self.device))
        cols = local_start[:, None] + torch.arange(0, chunk, ps, device=self.device)[None, :]
        cols.clamp_(max=self.max_context_len - 1)
        lm.local_block_table.copy_(self.req_to_token[req_pool_indices[:, None], cols] // ps)

    # ------------------------------------------------------------ forward

    def forward(self, q, k, v, layer, forward_batch: ForwardBatch, save_kv_cache: bool = True):
        if forward_batch.forward_mode.is_decode():
            return self.forward_decode(q, k, v, layer, forward_batch, save_kv_cache)
        return self.forward_extend(q, k, v, layer, forward_batch, save_kv_cache)

    def _save_kv(self, layer, forward_batch, k, v) -> None:
        if k is not None and not layer.is_cross_attention:
            forward_batch.kv_cache.set_kv_buffer(layer.layer_id, forward_batch.out_cache_loc, k, v)

    def forward_extend(self, q, k, v, layer, forward_batch: ForwardBatch, save_kv_cache: bool = True):
        if save_kv_cache:
            self._save_kv(layer, forward_batch, k, v)
        md = self.forward_metadata
        k_cache, v_cache = forward_batch.kv_cache.get_kv_buffer(layer.layer_id)
        q = q.reshape(-1, layer.num_heads, layer.head_dim)
        if layer.is_cross_attention:
            return flash_attn_varlen_func(
                q, k_cache, v_cache, md.cu_seqlens_q, md.encoder_cu_seqlens_k, md.max_seq_len_q,
                md.encoder_max_seq_len_k, softmax_scale=layer.scaling, causal=False, block_table=md.encoder_page_table,
            )
        if layer.use_local_attention and md.local_attn_metadata is not None:
            lm = md.local_attn_metadata
            return flash_attn_with_kvcache(
                q, k_cache, v_cache, lm.local_seqused_k, lm.local_block_table, lm.local_query_start_loc,
                lm.local_max_query_len, softmax_scale=layer.scaling, causal=True,
            )
        return flash_attn_varlen_func(
            q, k_cache, v_cache, md.cu_seqlens_q, md.cu_seqlens_k, md.max_seq_len_q, md.max_seq_len_k,
            softmax_scale=layer.scaling, causal=True, block_table=md.page_table,
        )

    def forward_decode(self, q, k, v, layer, forward_batch: ForwardBatch, save_kv_cache: bool = True):
        if save_kv_cache:
            self._save_kv(layer, forward_batch, k, v)
        md = self.forward_metadata
        k_cache, v_cache = forward_batch.kv_cache.get_kv_buffer(layer.layer_id)
        q = q.reshape(-1, layer.num_heads, layer.head_dim)
        if layer.is_cross_attention:
            return flash_attn_varlen_func(
                q, k_cache, v_cache, md.cu_seqlens_q, md.encoder_cu_seqlens_k, 1, md.encoder_max_seq_len_k,
                softmax_scale=layer.scaling, causal=False, block_table=md.encoder_page_table,
            )
        if layer.use_local_attention and md.local_attn_metadata is not None:
            lm = md.local_attn_metadata
            return flash_attn_with_kvcache(
                q, k_cache, v_cache, lm.local_seqused_k, lm.local_block_table, lm.local_query_start_loc,
                lm.local_max_query_len, softmax_scale=layer.scaling, causal=True,
            )
        if forward_batch.spec_info is not None and self.topk > 1:
            # prefix part: the topk branches of a request share its prefix pages
            o_prefix, lse_prefix = flash_attn_varlen_func(
                q, k_cache, v_cache, md.cu_seqlens_q, md.cu_seqlens_k, md.max_seq_len_q, md.max_seq_len_k,
                softmax_scale=layer.scaling, causal=False, block_table=md.page_table, return_softmax_lse=True,
            )
            # expand part: each branch's own draft tokens, addressed per token (page size 1)
            me = self.forward_metadata_spec_decode_expand
            k_tok = k_cache.view(-1, 1, *k_cache.shape[2:])
            v_tok = v_cache.view(-1, 1, *v_cache.shape[2:])
            o_expand, lse_expand = flash_attn_with_kvcache(
                q, k_tok, v_tok, me.cache_seqlens_int32, me.page_table, me.cu_seqlens_q, 1,
                softmax_scale=layer.scaling, causal=False, return_softmax_lse=True,
            )
            out, _ = merge_state(o_prefix, lse_prefix, o_expand, lse_expand)
            return out
        return flash_attn_with_kvcache(
            q, k_cache, v_cache, md.cache_seqlens_int32, md.page_table, md.cu_seqlens_q, md.max_seq_len_q,
            softmax_scale=layer.scaling, causal=True,
        )
