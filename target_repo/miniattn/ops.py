"""Attention over a paged KV cache.

Two entry points with flash-attn's calling conventions:

* `flash_attn_with_kvcache`: key lengths come from `cache_seqlens`;
* `flash_attn_varlen_func`: key lengths come from `cu_seqlens_k` (prefix sums).

Queries are packed ([total_q, heads, dim]) and split by `cu_seqlens_q`. The causal mask is
aligned bottom-right (the last query of a sequence sees all its keys). Only page-table
entries inside a sequence's key length are dereferenced. On CUDA with fp16/bf16 inputs the
flash-attn kernels are used when importable; otherwise a PyTorch implementation with the
same semantics runs (static shapes only, so it can be captured in a CUDA graph).
"""

from __future__ import annotations

import os

import torch

try:  # FlashAttention-3 interface (paged KV with any page size, packed varlen queries)
    from flash_attn_interface import flash_attn_with_kvcache as _fa_with_kvcache
except Exception:  # noqa: BLE001 - any import problem means "not available"
    try:
        from sgl_kernel.flash_attn import flash_attn_with_kvcache as _fa_with_kvcache
    except Exception:  # noqa: BLE001
        _fa_with_kvcache = None

HAS_FLASH_ATTN = _fa_with_kvcache is not None


def _use_flash(q: torch.Tensor) -> bool:
    return (
        HAS_FLASH_ATTN
        and q.is_cuda
        and q.dtype in (torch.float16, torch.bfloat16)
        and os.environ.get("MINIATTN_DISABLE_FLASH", "0") != "1"
    )


def _flash(q, k_cache, v_cache, page_table, cu_seqlens_q, seqlens_k, max_seqlen_q, causal, softmax_scale, return_lse):
    res = _fa_with_kvcache(
        q,
        k_cache,
        v_cache,
        cache_seqlens=seqlens_k.to(torch.int32),
        page_table=page_table,
        cu_seqlens_q=cu_seqlens_q,
        max_seqlen_q=max_seqlen_q,
        softmax_scale=softmax_scale,
        causal=causal,
        return_softmax_lse=return_lse,
    )
    if not return_lse:
        return res[0] if isinstance(res, (tuple, list)) else res
    out, lse = res[0], res[1]
    return out, lse.transpose(0, 1).float()  # varlen lse is [heads, total_q]


def _paged_attention_torch(q, k_cache, v_cache, page_table, cu_seqlens_q, seqlens_k, causal, softmax_scale, return_lse):
    total_q, num_heads, head_dim = q.shape
    page_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    batch, max_pages = page_table.shape
    device = q.device
    max_k = max_pages * page_size

    cu_q = cu_seqlens_q.to(torch.int64)
    seqlens_k = seqlens_k.to(torch.int64)
    t = torch.arange(total_q, device=device)
    seq = torch.searchsorted(cu_q, t, right=True) - 1
    seq_c = seq.clamp(0, batch - 1)
    q_end = cu_q[seq_c + 1]
    valid_q = (seq >= 0) & (seq < batch) & (t >= cu_q[seq_c]) & (t < q_end)

    page_start = torch.arange(max_pages, device=device) * page_size
    pages = torch.where(page_start[None, :] < seqlens_k[:, None], page_table.to(torch.int64), 0)
    k = k_cache[pages].reshape(batch, max_k, num_kv_heads, head_dim)[seq_c]
    v = v_cache[pages].reshape(batch, max_k, num_kv_heads, head_dim)[seq_c]

    k_len = seqlens_k[seq_c]
    j = torch.arange(max_k, device=device)
    mask = (j[None, :] < k_len[:, None]) & valid_q[:, None]
    if causal:
        mask &= j[None, :] <= (k_len - (q_end - t))[:, None]

    qf = q.reshape(total_q, num_kv_heads, group, head_dim).float()
    scores = torch.einsum("thgd,tlhd->thgl", qf, k.float()) * softmax_scale
    scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - torch.where(torch.isinf(lse), 0.0, lse)[..., None])
    out = torch.einsum("thgl,tlhd->thgd", probs, v.float())
    out = out.reshape(total_q, num_heads, head_dim).to(q.dtype)
    if return_lse:
        return out, lse.reshape(total_q, num_heads)
    return out


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    cache_seqlens,
    page_table,
    cu_seqlens_q,
    max_seqlen_q,
    softmax_scale=None,
    causal=False,
    return_softmax_lse=False,
):
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    if _use_flash(q):
        return _flash(q, k_cache, v_cache, page_table, cu_seqlens_q, cache_seqlens, max_seqlen_q, causal, softmax_scale,
                      return_softmax_lse)
    return _paged_attention_torch(q, k_cache, v_cache, page_table, cu_seqlens_q, cache_seqlens, causal, softmax_scale,
                                  return_softmax_lse)


def flash_attn_varlen_func(
    q,
    k_cache,
    v_cache,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    softmax_scale=None,
    causal=False,
    block_table=None,
    return_softmax_lse=False,
):
    seqlens_k = cu_seqlens_k[1:] - cu_seqlens_k[:-1]
    return flash_attn_with_kvcache(
        q,
        k_cache,
        v_cache,
        seqlens_k,
        block_table,
        cu_seqlens_q,
        max_seqlen_q,
        softmax_scale=softmax_scale,
        causal=causal,
        return_softmax_lse=return_softmax_lse,
    )


def merge_state(o_a, lse_a, o_b, lse_b):
    """Combine two partial attentions over disjoint key sets (lse: [tokens, heads])."""
    lse = torch.logaddexp(lse_a, lse_b)
    base = torch.where(torch.isinf(lse), 0.0, lse)
    w_a = torch.exp(lse_a - base)[..., None]
    w_b = torch.exp(lse_b - base)[..., None]
    out = o_a.float() * w_a + o_b.float() * w_b
    return out.to(o_a.dtype), lse
