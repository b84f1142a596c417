"""Paged KV cache, request-to-token table and a small page allocator.

Layout: every layer owns a K and a V buffer of shape [num_pages, page_size, kv_heads, head_dim].
A token slot is `page * page_size + offset`. `req_to_token[r, p]` is the slot holding position
`p` of request `r`; positions of one request that fall in the same logical page share a
physical page, so `req_to_token[r, k * page_size] // page_size` is the request's k-th page.

Page 0 and request row 0 are reserved as padding targets: CUDA-graph padding points there.
"""

from __future__ import annotations

import random

import torch


class ReqToTokenPool:
    def __init__(self, size: int, max_context_len: int, device: torch.device | str):
        self.size = size
        self.max_context_len = max_context_len
        self.device = torch.device(device)
        self.req_to_token = torch.zeros((size, max_context_len), dtype=torch.int32, device=self.device)
        self.free_slots = list(range(1, size))

    def alloc(self) -> int:
        if not self.free_slots:
            raise RuntimeError("req_to_token pool is full")
        return self.free_slots.pop(0)

    def free(self, idx: int) -> None:
        self.free_slots.append(idx)


class PagedKVCache:
    def __init__(
        self,
        num_pages: int,
        page_size: int,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ):
        self.num_pages = num_pages
        self.page_size = page_size
        self.num_layers = num_layers
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.device = torch.device(device)
        shape = (num_pages, page_size, num_kv_heads, head_dim)
        self.k_buffer = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(num_layers)]
        self.v_buffer = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(num_layers)]

    @property
    def num_slots(self) -> int:
        return self.num_pages * self.page_size

    def get_kv_buffer(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k_buffer[layer_id], self.v_buffer[layer_id]

    def set_kv_buffer(self, layer_id: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        h, d = self.num_kv_heads, self.head_dim
        self.k_buffer[layer_id].view(-1, h, d)[loc] = k.reshape(-1, h, d).to(self.dtype)
        self.v_buffer[layer_id].view(-1, h, d)[loc] = v.reshape(-1, h, d).to(self.dtype)


class TokenAllocator:
    """Hands out pages to requests and keeps `req_to_token` in sync (a tiny scheduler)."""

    def __init__(self, req_to_token_pool: ReqToTokenPool, kv_cache: PagedKVCache, seed: int = 0):
        self.pool = req_to_token_pool
        self.kv = kv_cache
        self.page_size = kv_cache.page_size
        self.free_pages = list(range(1, kv_cache.num_pages))
        random.Random(seed).shuffle(self.free_pages)
        self.pages: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}

    def _take_pages(self, n: int) -> list[int]:
        if n > len(self.free_pages):
            raise RuntimeError(f"out of KV pages: need {n}, have {len(self.free_pages)}")
        taken, self.free_pages = self.free_pages[:n], self.free_pages[n:]
        return taken

    def new_request(self) -> int:
        r = self.pool.alloc()
        self.pages[r] = []
        self.lengths[r] = 0
        return r

    def length(self, r: int) -> int:
        return self.lengths[r]

    def append(self, r: int, n: int) -> torch.Tensor:
        """Give request `r` n more positions; returns their slots (int64, on the pool's device)."""
        start = self.lengths[r]
        end = start + n
        if end > self.pool.max_context_len:
            raise RuntimeError(f"request {r} exceeds max_context_len ({end} > {self.pool.max_context_len})")
        need = -(-end // self.page_size) - len(self.pages[r])
        if need > 0:
            self.pages[r].extend(self._take_pages(need))
        pos = torch.arange(start, end)
        page_ids = torch.tensor(self.pages[r], dtype=torch.int64)[pos // self.page_size]
        slots = page_ids * self.page_size + pos % self.page_size
        self.pool.req_to_token[r, start:end] = slots.to(device=self.pool.device, dtype=torch.int32)
        self.lengths[r] = end
        return slots.to(self.pool.device)

    def pad_to_page(self, r: int) -> None:
        """Skip to the next page boundary (the next position starts a fresh page)."""
        self.lengths[r] = -(-self.lengths[r] // self.page_size) * self.page_size
        if self.lengths[r] > self.pool.max_context_len:
            raise RuntimeError("request exceeds max_context_len")

    def alloc_slots(self, n: int) -> torch.Tensor:
        """Slots that belong to no request row (e.g. tree-draft tokens), in shuffled order."""
        pages = self._take_pages(-(-n // self.page_size))
        slots = (torch.tensor(pages)[:, None] * self.page_size + torch.arange(self.page_size)[None, :]).flatten()
        perm = torch.randperm(slots.numel(), generator=torch.Generator().manual_seed(len(self.free_pages)))
        return slots[perm][:n].to(self.pool.device)

    def free_slots(self, slots: torch.Tensor) -> None:
        self.free_pages.extend(torch.unique(slots.cpu() // self.page_size).tolist())

    def free_request(self, r: int) -> None:
        self.free_pages.extend(self.pages.pop(r))
        self.lengths.pop(r)
        self.pool.free(r)
