"""CPU stand-in for `sgl_kernel.flash_attn` (FlashAttention-3, sgl-kernel 0.1.4), as the backend calls it.

`flash_attn_with_kvcache` is called by the backend with varlen queries (`cu_seqlens_q`) over a paged KV cache
(`page_table`, `cache_seqlens`) and no new K/V. Before computing anything it checks every tensor it receives
against what the CUDA kernel relies on:

- `cu_seqlens_q`: int32, batch+1 entries, starts at 0, never decreases, ends within q's rows;
  `max_seqlen_q` >= every query length.
- `cache_seqlens`: int32, one per batch entry, >= 0, and every page it implies lies inside `page_table`'s storage
  (the kernel addresses row b at `page_table + b * stride(0)`, so a view narrower than the pages it needs is
  followed into the rest of its storage, as the GPU does).
- `page_table` entries for positions < cache_seqlens: inside the KV pool.
- `cu_seqlens_k_new`: checked as a prefix sum (starts at 0, never decreases) although FA3 reads it only when new
  K/V are passed: the backend hands it over as the metadata's key prefix sum, and garbage there is a bug waiting
  for the first kernel that does read it.
- float inputs that are read (the covered q rows, the K/V entries inside the lengths): no NaN/inf.

Then it computes softmax attention in float32 over exactly the keys the kernel would read. Query rows no batch entry
covers are returned as NaN (the real kernel leaves them uninitialised). With `return_softmax_lse=True` it returns
(out, lse) with lse shaped [heads, total_q], as FA3's varlen path does.
"""

from __future__ import annotations

import math

import torch

from ._contract import TAPE, KernelContractError, check_finite, check_prefix_sum, first_index, signature

KERNEL = "flash_attn_with_kvcache"


def _page_rows(page_table: torch.Tensor, b: int, n_pages: int) -> torch.Tensor:
    """Entries 0..n_pages-1 of row b, addressed the way the kernel does (base + b*stride0 + p*stride1)."""
    if n_pages <= page_table.shape[1]:
        return page_table[b, :n_pages]
    storage_elems = page_table.untyped_storage().nbytes() // page_table.element_size()
    start = page_table.storage_offset() + b * page_table.stride(0)
    last = start + (n_pages - 1) * page_table.stride(1)
    if last >= storage_elems:
        raise KernelContractError(
            f"page_table row {b} needs {n_pages} pages but its storage ends after "
            f"{(storage_elems - start - 1) // page_table.stride(1) + 1} ({KERNEL})")
    return torch.as_strided(page_table, (n_pages,), (page_table.stride(1),), start)


def flash_attn_with_kvcache(
    q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
    cache_batch_idx=None, cache_leftpad=None, page_table=None, cu_seqlens_q=None, cu_seqlens_k_new=None,
    max_seqlen_q=None, rotary_seqlens=None, q_descale=None, k_descale=None, v_descale=None, softmax_scale=None,
    causal=False, window_size=(-1, -1), softcap=0.0, rotary_interleaved=True, scheduler_metadata=None,
    num_splits=0, pack_gqa=None, sm_margin=0, return_softmax_lse=False,
):
    TAPE.visit(KERNEL, signature(
        q=q, k_cache=k_cache, v_cache=v_cache, page_table=page_table, cache_seqlens=cache_seqlens,
        cu_seqlens_q=cu_seqlens_q, cu_seqlens_k_new=cu_seqlens_k_new, max_seqlen_q=max_seqlen_q,
        softmax_scale=softmax_scale, causal=causal, window_size=tuple(window_size), softcap=softcap,
        return_softmax_lse=return_softmax_lse))
    for name, val in (("k", k), ("v", v), ("qv", qv), ("rotary_cos", rotary_cos), ("cache_batch_idx", cache_batch_idx),
                      ("cache_leftpad", cache_leftpad), ("q_descale", q_descale), ("k_descale", k_descale),
                      ("v_descale", v_descale)):
        if val is not None:
            raise KernelContractError(f"{name} is not supported by this CPU stub ({KERNEL})")
    if page_table is None or cache_seqlens is None or cu_seqlens_q is None:
        raise KernelContractError(f"this stub needs page_table, cache_seqlens and cu_seqlens_q ({KERNEL})")
    if q.dim() != 3 or k_cache.dim() != 4 or v_cache.dim() != 4:
        raise KernelContractError(
            f"q {tuple(q.shape)}, k_cache {tuple(k_cache.shape)}, v_cache {tuple(v_cache.shape)}: expected "
            f"[tokens, heads, dim] and [pages, page_size, kv_heads, dim] ({KERNEL})")
    total_q, hq, d = q.shape
    num_pages, page_size, hk, _ = k_cache.shape
    if hq % hk:
        raise KernelContractError(f"{hq} query heads are not a multiple of {hk} KV heads ({KERNEL})")
    batch = cu_seqlens_q.numel() - 1
    if batch < 1:
        raise KernelContractError(f"cu_seqlens_q has {cu_seqlens_q.numel()} entries ({KERNEL})")
    cu_q = check_prefix_sum("cu_seqlens_q", cu_seqlens_q, batch + 1, total_q, KERNEL)
    q_lens = [cu_q[i + 1] - cu_q[i] for i in range(batch)]
    if max_seqlen_q is None or int(max_seqlen_q) < max(q_lens):
        b = max(range(batch), key=lambda i: q_lens[i])
        raise KernelContractError(
            f"max_seqlen_q = {max_seqlen_q} < query length {q_lens[b]} of batch entry {b} ({KERNEL})")
    if cache_seqlens.dtype != torch.int32 or cache_seqlens.dim() != 1 or cache_seqlens.numel() != batch:
        raise KernelContractError(
            f"cache_seqlens is {cache_seqlens.dtype} {tuple(cache_seqlens.shape)}, expected int32 ({batch},) ({KERNEL})")
    if page_table.dtype != torch.int32 or page_table.dim() != 2 or page_table.shape[0] != batch:
        raise KernelContractError(
            f"page_table is {page_table.dtype} {tuple(page_table.shape)}, expected int32 ({batch}, pages) ({KERNEL})")
    k_lens = cache_seqlens.tolist()
    for b, n in enumerate(k_lens):
        if n < 0:
            raise KernelContractError(f"cache_seqlens[{b}] = {n} < 0 ({KERNEL})")
        n_pages = -(-n // page_size)
        if n_pages > page_table.shape[1]:
            # The kernel follows the row stride past the view's width; stay inside the storage.
            storage_elems = page_table.untyped_storage().nbytes() // page_table.element_size()
            start = page_table.storage_offset() + b * page_table.stride(0)
            reach = (storage_elems - start - 1) // page_table.stride(1) + 1
            if n_pages > reach:
                raise KernelContractError(
                    f"cache_seqlens[{b}] = {n} needs {n_pages} pages, page_table row {b} reaches "
                    f"{min(reach, page_table.shape[1])} (width {page_table.shape[1]}, page_size {page_size}) ({KERNEL})")
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(d)
    left, right = window_size

    out = torch.full((total_q, hq, v_cache.shape[-1]), float("nan"), dtype=q.dtype)
    lse = torch.full((hq, total_q), float("nan"), dtype=torch.float32)
    group = hq // hk
    for b in range(batch):
        sq, sk = q_lens[b], k_lens[b]
        if sq == 0:
            continue
        n_pages = -(-sk // page_size)
        pages = _page_rows(page_table, b, n_pages).long() if n_pages else torch.zeros(0, dtype=torch.long)
        bad = (pages < 0) | (pages >= num_pages)
        if bool(bad.any()):
            p = first_index(bad)[0]
            raise KernelContractError(
                f"page_table[{b}, {p}] = {int(pages[p])} is outside the KV pool's {num_pages} pages "
                f"(read for cache_seqlens[{b}] = {sk}) ({KERNEL})")
        qb = q[cu_q[b]:cu_q[b + 1]]
        check_finite(f"q (rows {cu_q[b]}..{cu_q[b + 1] - 1}) ", qb, KERNEL)
        if sk:
            kb = k_cache[pages].reshape(-1, hk, d)[:sk]
            vb = v_cache[pages].reshape(-1, hk, v_cache.shape[-1])[:sk]
            check_finite(f"k_cache (batch {b}) ", kb, KERNEL)
            check_finite(f"v_cache (batch {b}) ", vb, KERNEL)
        else:
            kb = torch.zeros(0, hk, d, dtype=k_cache.dtype)
            vb = torch.zeros(0, hk, v_cache.shape[-1], dtype=v_cache.dtype)
        kb = kb.float().repeat_interleave(group, dim=1)  # [sk, hq, d]
        vb = vb.float().repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", qb.float(), kb) * softmax_scale
        if softcap and softcap > 0:
            scores = softcap * torch.tanh(scores / softcap)
        qpos = torch.arange(sq).unsqueeze(1) + (sk - sq)  # bottom-right aligned, as FA does
        kpos = torch.arange(sk).unsqueeze(0)
        allowed = torch.ones(sq, sk, dtype=torch.bool)
        if causal:
            allowed &= kpos <= qpos
        if left >= 0:
            allowed &= kpos >= qpos - left
        if right >= 0 and not causal:
            allowed &= kpos <= qpos + right
        scores = scores.masked_fill(~allowed.unsqueeze(0), float("-inf"))
        m = scores.amax(dim=-1, keepdim=True) if sk else torch.full((hq, sq, 1), float("-inf"))
        m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        p = torch.exp(scores - m_safe)
        denom = p.sum(dim=-1, keepdim=True)
        o = torch.einsum("hqk,khd->qhd", p / torch.where(denom > 0, denom, torch.ones_like(denom)), vb)
        out[cu_q[b]:cu_q[b + 1]] = o.to(q.dtype)
        lse[:, cu_q[b]:cu_q[b + 1]] = torch.where(
            denom > 0, m_safe + torch.log(torch.where(denom > 0, denom, torch.ones_like(denom))),
            torch.full_like(denom, float("-inf"))).squeeze(-1)
    if cu_seqlens_k_new is not None:  # checked last: FA3 itself reads it only together with new K/V
        check_prefix_sum("cu_seqlens_k_new", cu_seqlens_k_new, batch + 1, None, KERNEL)
    if return_softmax_lse:
        return out, lse
    return out


def flash_attn_varlen_func(*args, **kwargs):
    raise KernelContractError("flash_attn_varlen_func is only used by the MLA prefill path, not run by this harness")
