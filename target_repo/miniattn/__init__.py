"""miniattn: a small paged-KV attention backend with CUDA-graph support.

Runs on CPU (PyTorch reference kernels, graphs emulated by eager replay) and on CUDA
(flash-attn when importable, real CUDA graphs).
"""

from miniattn.device import get_device
from miniattn.forward_batch import ForwardBatch, ForwardMode, SpecInfo
from miniattn.kv_cache import PagedKVCache, ReqToTokenPool, TokenAllocator
from miniattn.model import AttentionLayer, AttentionStack
from miniattn.flashattention_backend import FlashAttentionBackend, FlashAttentionMetadata
from miniattn.graph_runner import GraphRunner

__all__ = [
    "AttentionLayer",
    "AttentionStack",
    "FlashAttentionBackend",
    "FlashAttentionMetadata",
    "ForwardBatch",
    "ForwardMode",
    "GraphRunner",
    "PagedKVCache",
    "ReqToTokenPool",
    "SpecInfo",
    "TokenAllocator",
    "get_device",
]
