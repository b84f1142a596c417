from __future__ import annotations

import torch

from miniattn.forward_batch import ForwardBatch


class AttentionLayer:
    """One attention layer; projections are left out, q/k/v come with the batch."""

    def __init__(
        self,
        layer_id: int,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        *,
        is_cross_attention: bool = False,
        use_local_attention: bool = False,
        scaling: float | None = None,
    ):
        assert num_heads % num_kv_heads == 0
        self.layer_id = layer_id
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.is_cross_attention = is_cross_attention
        self.use_local_attention = use_local_attention
        self.scaling = head_dim**-0.5 if scaling is None else scaling

    def forward(self, q, k, v, forward_batch: ForwardBatch) -> torch.Tensor:
        return forward_batch.attn_backend.forward(q, k, v, self, forward_batch)


class AttentionStack:
    """Attention-only model: layer l reads q[:, l], k[:, l], v[:, l]; returns [tokens, layers, heads, dim]."""

    def __init__(self, layers: list[AttentionLayer]):
        self.layers = layers

    def forward(self, forward_batch: ForwardBatch) -> torch.Tensor:
        outs = []
        for i, layer in enumerate(self.layers):
            q = forward_batch.q[:, i]
            k = forward_batch.k[:, i]
            v = forward_batch.v[:, i]
            outs.append(layer.forward(q, k, v, forward_batch).view(q.shape))
        return torch.stack(outs, dim=1)
