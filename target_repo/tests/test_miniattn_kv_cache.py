import torch

from miniattn import PagedKVCache, ReqToTokenPool, TokenAllocator


def test_pages_are_contiguous_within_a_request():
    pool = ReqToTokenPool(4, 32, "cpu")
    kv = PagedKVCache(32, 4, 1, 1, 2)
    alloc = TokenAllocator(pool, kv, seed=3)
    r = alloc.new_request()
    a = alloc.append(r, 5)
    b = alloc.append(r, 6)
    slots = torch.cat([a, b])
    assert slots.tolist() == pool.req_to_token[r, :11].tolist()
    pages = slots // 4
    for p in range(0, 11, 4):
        assert (pages[p : p + 4] == pages[p]).all()
        assert (slots[p : p + 4] % 4 == torch.arange(len(slots[p : p + 4]))).all()
    assert 0 not in pages.tolist()  # page 0 is the padding page


def test_pad_to_page_and_free():
    pool = ReqToTokenPool(4, 32, "cpu")
    kv = PagedKVCache(16, 4, 1, 1, 2)
    alloc = TokenAllocator(pool, kv)
    r = alloc.new_request()
    alloc.append(r, 3)
    alloc.pad_to_page(r)
    assert alloc.length(r) == 4
    s = alloc.append(r, 1)
    assert int(s) % 4 == 0
    free_before = len(alloc.free_pages)
    alloc.free_request(r)
    assert len(alloc.free_pages) == free_before + 2


def test_set_kv_buffer_roundtrip():
    kv = PagedKVCache(8, 2, 2, 2, 4)
    loc = torch.tensor([3, 10, 5])
    k = torch.randn(3, 2, 4)
    v = torch.randn(3, 2, 4)
    kv.set_kv_buffer(1, loc, k, v)
    kc, vc = kv.get_kv_buffer(1)
    assert torch.equal(kc.view(-1, 2, 4)[loc], k)
    assert torch.equal(vc.view(-1, 2, 4)[loc], v)
    assert kv.get_kv_buffer(0)[0].abs().sum() == 0
