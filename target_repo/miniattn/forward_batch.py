from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, auto
from typing import TYPE_CHECKING, Optional

import torch

if TYPE_CHECKING:
    from miniattn.flashattention_backend import FlashAttentionBackend
    from miniattn.kv_cache import PagedKVCache, ReqToTokenPool


class ForwardMode(IntEnum):
    EXTEND = auto()
    DECODE = auto()
    TARGET_VERIFY = auto()

    def is_extend(self) -> bool:
        return self == ForwardMode.EXTEND

    def is_decode(self) -> bool:
        return self == ForwardMode.DECODE

    def is_target_verify(self) -> bool:
        return self == ForwardMode.TARGET_VERIFY


@dataclass
class SpecInfo:
    """Speculative-decoding inputs.

    Draft decode: `draft_token_loc[b * topk + j, s]` is the slot of branch j's draft token at
    step s (topk > 1 only; with topk == 1 draft tokens live in `req_to_token`).
    Target verify: `num_draft_tokens` tokens per request, appended after `seq_lens`.
    """

    topk: int = 1
    num_draft_tokens: int = 0
    draft_token_loc: Optional[torch.Tensor] = None


@dataclass
class ForwardBatch:
    forward_mode: ForwardMode
    batch_size: int
    req_pool_indices: torch.Tensor  # [bs] int64
    # DECODE: length including the token being decoded. EXTEND: prefix + extend.
    # Draft DECODE and TARGET_VERIFY: the verified length (draft tokens not included).
    seq_lens: torch.Tensor  # [bs] int64, on device
    seq_lens_cpu: torch.Tensor  # [bs] int64, on CPU
    out_cache_loc: torch.Tensor  # [num_tokens] int64: slots the new tokens' K/V go to
    q: torch.Tensor  # [num_tokens, num_layers, num_heads, head_dim]
    k: torch.Tensor  # [num_tokens, num_layers, num_kv_heads, head_dim]
    v: torch.Tensor
    req_to_token_pool: "ReqToTokenPool"
    kv_cache: "PagedKVCache"
    attn_backend: Optional["FlashAttentionBackend"] = None
    seq_lens_sum: int = 0
    extend_seq_lens: Optional[torch.Tensor] = None
    extend_prefix_lens: Optional[torch.Tensor] = None
    extend_seq_lens_cpu: Optional[list[int]] = None
    extend_prefix_lens_cpu: Optional[list[int]] = None
    encoder_lens: Optional[torch.Tensor] = None  # [bs] int32
    encoder_lens_cpu: Optional[list[int]] = None
    spec_info: Optional[SpecInfo] = None
    extra: dict = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return self.out_cache_loc.shape[0]
