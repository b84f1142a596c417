"""CPU stand-in for `sgl_kernel` (SGLang's CUDA kernel package), as far as the FlashAttention backend uses it.

Only `merge_state_v2` is provided at top level (the backend's cascade attention for EAGLE top-k > 1); the attention
kernels are in `sgl_kernel.flash_attn`. Each stub first checks its inputs against what the CUDA kernel relies on
(raising `KernelContractError` with the argument, index and value), then computes the result in plain torch.
"""

from __future__ import annotations

import torch

from ._contract import KernelContractError, check_finite  # noqa: F401

__version__ = "0.1.4"  # the sgl-kernel that sglang 0.4.6.post5 pins


def merge_state_v2(v_a: torch.Tensor, s_a: torch.Tensor, v_b: torch.Tensor, s_b: torch.Tensor,
                   v_merged: torch.Tensor | None = None, s_merged: torch.Tensor | None = None):
    """Merge two partial attention results by their log-sum-exp (sgl_kernel.merge_state_v2).

    v_*: [tokens, heads, head_dim]; s_*: [tokens, heads] float32 LSE (natural log). Returns (v, s).
    A side with s = -inf (no key attended) has weight 0; when both are -inf the result is 0 / -inf.
    """
    kernel = "merge_state_v2"
    if v_a.shape != v_b.shape:
        raise KernelContractError(f"v_a shape {tuple(v_a.shape)} != v_b shape {tuple(v_b.shape)} ({kernel})")
    if s_a.shape != s_b.shape or tuple(s_a.shape) != tuple(v_a.shape[:2]):
        raise KernelContractError(
            f"s_a {tuple(s_a.shape)} / s_b {tuple(s_b.shape)} do not match v {tuple(v_a.shape[:2])} ({kernel})")
    for name, s in (("s_a", s_a), ("s_b", s_b)):
        bad = torch.isnan(s) | (s == float("inf"))
        if bool(bad.any()):
            idx = tuple(int(i) for i in bad.nonzero()[0])
            raise KernelContractError(f"{name}{list(idx)} = {float(s[idx])} ({kernel})")
    s_a32, s_b32 = s_a.float(), s_b.float()
    m = torch.maximum(s_a32, s_b32)
    m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    w_a = torch.exp(s_a32 - m_safe)
    w_b = torch.exp(s_b32 - m_safe)
    for name, v, w in (("v_a", v_a, w_a), ("v_b", v_b, w_b)):
        used = (w > 0).unsqueeze(-1).expand_as(v)
        bad = ~torch.isfinite(v) & used
        if bool(bad.any()):
            idx = tuple(int(i) for i in bad.nonzero()[0])
            raise KernelContractError(f"{name}{list(idx)} = {float(v[idx])} is read ({kernel})")
    total = w_a + w_b
    denom = torch.where(total > 0, total, torch.ones_like(total))
    v_a0 = torch.where(w_a.unsqueeze(-1) > 0, v_a.float(), torch.zeros((), dtype=torch.float32))
    v_b0 = torch.where(w_b.unsqueeze(-1) > 0, v_b.float(), torch.zeros((), dtype=torch.float32))
    v = ((w_a.unsqueeze(-1) * v_a0 + w_b.unsqueeze(-1) * v_b0) / denom.unsqueeze(-1)).to(v_a.dtype)
    s = torch.where(total > 0, m_safe + torch.log(denom), torch.full_like(m, float("-inf")))
    if v_merged is not None:
        v_merged.copy_(v)
        v = v_merged
    if s_merged is not None:
        s_merged.copy_(s)
        s = s_merged
    return v, s
