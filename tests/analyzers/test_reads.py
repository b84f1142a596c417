"""Read sites of preallocated buffers (agent.analyzers.reads): what counts as a read, through
which aliases, with which guard, and on the real SGLang backend.

Snippets mark their expected read lines with `# read`; the allocation line with `# alloc`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent.analyzers.reads import ReadSite, read_sites

REPO = Path(__file__).resolve().parents[2]
SGLANG = REPO / "tasks/real/sglang-fa/sglang/srt/layers/attention/flashattention_backend.py"


def _marked(source: str, mark: str) -> list[int]:
    return [i for i, line in enumerate(source.splitlines(), 1) if re.search(rf"#.*\b{mark}\b", line)]


def _sites(source: str) -> list[ReadSite]:
    (alloc,) = _marked(source, "alloc")
    return read_sites(source, [alloc])[alloc]


def _lines(source: str) -> list[int]:
    return sorted({s.line for s in _sites(source)})


def test_reads_and_non_reads_of_a_local_buffer():
    src = '''import torch

def f(src, idx, kernel, other):
    buf = torch.zeros(8)  # alloc
    n = buf.shape[0] + buf.size(0) + len(buf) + buf.numel()
    like = torch.empty_like(buf)
    view = buf[:4]
    alias = buf
    if other is None:  # writes on one path only
        buf.copy_(src)
        buf.fill_(0)
    buf[:2] = 1.0
    if other is None:
        torch.cumsum(src, 0, out=buf)
    kernel(x=buf)  # read
    other.copy_(buf)  # read
    m = buf.max()  # read
    s = torch.cumsum(alias, 0)  # read
    t = buf + 1  # read
    ok = buf > 0  # read
    v = buf.item()  # read
    x = buf[2]  # read
    y = buf[idx]  # read
    z = other[buf]  # read
    buf += 1  # read
    buf.add_(src)  # read
    w = view.tolist()  # read
    u = torch.cat([src, buf.T])  # read
    return n, like, m, s, t, ok, v, x, y, z, w, u
'''
    assert _lines(src) == _marked(src, "read")


def test_how_names_the_kernel_keyword_and_the_op():
    src = '''import torch

def f(kernel, src):
    buf = torch.zeros(8)  # alloc
    kernel(src, cu_seqlens_k_new=buf)
    kernel(buf)
    torch.cumsum(buf, 0)
    buf.max()
'''
    hows = {s.how for s in _sites(src)}
    assert hows == {"passed to kernel (cu_seqlens_k_new=)", "passed to kernel (argument 1)",
                    "read by torch.cumsum (argument 1)", "read by .max()"}


def test_reads_through_self_dicts_metadata_objects_and_helpers():
    src = '''import torch

def helper(t):
    return t.sum()  # read


class Meta:
    cu = None


class Backend:
    def init_state(self, n):
        self.bufs = {"cu": torch.zeros(n + 1)}  # alloc

    def capture(self, bs):
        md = Meta()
        md.cu = self.bufs["cu"][: bs + 1]
        self.graphs[bs] = md
        self.forward_metadata = md

    def replay(self, bs, seq_lens):
        md = self.graphs[bs]
        md.cu[1:].copy_(torch.cumsum(seq_lens, 0))
        self._check(md)

    def _check(self, meta):
        cu = meta.cu
        if cu[0] != 0:  # read
            raise ValueError

    def forward(self, kernel):
        md = self.forward_metadata
        out = kernel(cu_seqlens=md.cu)  # read
        return out, helper(md.cu)
'''
    sites = _sites(src)
    assert sorted(s.line for s in sites) == _marked(src, "read")
    by_line = {s.line: s for s in sites}
    assert by_line[_marked(src, "read")[0]].function == "helper"
    assert by_line[_marked(src, "read")[1]].function == "Backend._check"
    assert by_line[_marked(src, "read")[2]].function == "Backend.forward"


def test_a_local_bound_in_branches_may_be_either_after_them():
    src = '''import torch

class B:
    def init(self, n):
        self.a = torch.zeros(n)  # alloc
        self.b = torch.zeros(n)

    def run(self, mode, kernel):
        if mode:
            cu = self.a
        else:
            cu = self.b
        kernel(cu)  # read

    def other(self, kernel):
        cu = self.a
        cu = torch.ones(3)
        kernel(cu)
'''
    assert _lines(src) == _marked(src, "read")


def test_a_field_reassigned_to_a_new_value_no_longer_names_the_buffer():
    src = '''import torch

class Meta:
    pass

class B:
    def init(self, n):
        self.buf = torch.zeros(n)  # alloc

    def capture(self, decode, seq_lens):
        md = Meta()
        if decode:
            md.cu = torch.cumsum(seq_lens, 0)
        else:
            md.cu = self.buf
        self.md = md

    def forward(self, kernel):
        kernel(self.md.cu)  # read
'''
    assert _lines(src) == _marked(src, "read")


def test_guards_name_the_conditions_outermost_first():
    src = '''import torch

def f(mode, topk, kernel, enc):
    buf = torch.zeros(8)  # alloc
    kernel(buf)
    if mode.is_decode():
        pass
    elif mode.is_verify():
        if topk <= 1:
            kernel(buf)
        else:
            kernel(x=buf)
    if not enc:
        pass
    else:
        if mode or topk:
            buf.max()
'''
    guards = {s.line: s.guard for s in _sites(src)}
    assert list(guards.values()) == [None, "mode.is_verify() and topk <= 1", "mode.is_verify() and not topk <= 1",
                                     "enc and (mode or topk)"]


def test_lines_that_allocate_nothing_are_left_out_and_multi_line_calls_count():
    src = '''import torch

def f(n):
    x = n + 1
    buf = torch.zeros(
        n,
        dtype=torch.int32,
    )
    return buf.sum()
'''
    result = read_sites(src, [4, 6])
    assert list(result) == [6]
    assert [s.line for s in result[6]] == [9]
    assert result[6][0].statement == 9


def test_sglang_encoder_lens_is_read_on_the_encoder_decoder_path():
    src = SGLANG.read_text()
    lines = src.splitlines()
    alloc = next(i for i, line in enumerate(lines, 1) if '"encoder_lens_int32": torch.zeros(' in line)
    sites = read_sites(src, [alloc], str(SGLANG))[alloc]
    replay = [s for s in sites if s.function == "FlashAttentionBackend.init_forward_metadata_replay_cuda_graph"]
    # the replay's cumsum reads it only after `metadata.encoder_lens_int32.copy_(...)` wrote it whole
    assert replay == []
    write = next(i for i, line in enumerate(lines, 1) if "metadata.encoder_lens_int32.copy_(" in line)
    assert "torch.cumsum(metadata.encoder_lens_int32" in lines[write + 1]
    decode = [s for s in sites if s.function == "FlashAttentionBackend.forward_decode"]
    assert [(s.how, s.guard) for s in decode] == [
        ("passed to flash_attn_with_kvcache (cache_seqlens=)", "not self.use_mla and layer.is_cross_attention")]


@pytest.mark.slow
def test_sglang_cu_seqlens_k_buffers_reach_the_kernels():
    src = SGLANG.read_text()
    lines = src.splitlines()
    allocs = [i for i, line in enumerate(lines, 1) if '"cu_seqlens_k": torch.zeros(' in line]
    assert len(allocs) == 5
    result = read_sites(src, allocs, str(SGLANG))
    # The decode buffer is never bound: capture gives decode metadata a fresh pad(cumsum(...)).
    assert result[allocs[0]] == []
    for alloc in allocs[1:]:
        kernel = [s for s in result[alloc] if s.how.startswith("passed to flash_attn_with_kvcache (cu_seqlens_k_new=)")]
        assert {s.function for s in kernel} >= {"FlashAttentionBackend.forward_decode"}
    # target verify (topk <= 1) runs through forward_extend: its cu_seqlens_k is read there
    verify = allocs[2]
    assert any(s.function == "FlashAttentionBackend.forward_extend" and "cu_seqlens_k_new=" in s.how
               for s in result[verify])
    # the capture gathers (copies) the page tables: a read at capture time
    page = next(i for i, line in enumerate(lines, 1) if '"page_table_draft_decode": torch.zeros(' in line)
    sites = read_sites(src, [page], str(SGLANG))[page]
    (gather,) = [s for s in sites if "a copy of it" not in s.how]
    # ... and the kernels read the gathered copy: those reads are the buffer's too
    copied = {s.function for s in sites if "a copy of it, made by indexing with a tensor" in s.how}
    assert copied == {"FlashAttentionBackend.forward_decode", "FlashAttentionBackend.forward_extend"}
    assert gather.function == "FlashAttentionBackend.init_forward_metadata_capture_cuda_graph"
    assert gather.how.startswith("indexed:")
    assert gather.guard == "forward_mode.is_decode_or_idle() and spec_info is not None and self.topk <= 1"


def test_calls_that_only_tag_a_tensor_are_not_reads():
    src = '''import torch
from torch._dynamo import mark_dynamic


class Cache:
    def __init__(self, n, kernel):
        self.buf = torch.zeros(n)  # alloc
        torch._dynamo.mark_static_address(self.buf)
        mark_dynamic(self.buf, 0)
        kernel(self.buf)  # read
'''
    assert _lines(src) == _marked(src, "read")


def test_reads_follow_a_copy_into_its_later_use():
    """`torch.cat([buf, x])` copies the buffer's elements: the copy's reads read them. An allocation made
    inside the copy (`torch.cat([torch.empty(1), x])`) is read wherever the copy is."""
    src = '''import torch


def f(n, x, kernel, idx):
    buf = torch.zeros(4)  # alloc
    joined = torch.cat([buf, x])  # read
    rolled = joined.roll(1)  # read
    rows = rolled[idx]  # read
    other = torch.ones(3)
    kernel(other)
    kernel(rows)  # read
    return rolled.sum()  # read
'''
    assert _lines(src) == _marked(src, "read")
    hows = {s.line: s.how for s in _sites(src)}
    assert hows[_marked(src, "read")[-1]] == "read by .sum() (a copy of it, made by .roll() at line 7)"
    inline = '''import torch


def f(x, kernel):
    padded = torch.cat([torch.empty(1, dtype=x.dtype), x])  # alloc
    kernel(x)
    return kernel(cu_seqlens=padded)  # read
'''
    assert _lines(inline) == _marked(inline, "read")


def test_a_write_of_every_element_before_the_reads_on_every_path_discharges_them():
    src = '''import torch


class Runner:
    def __init__(self, n):
        self.buf = torch.zeros(n)  # alloc

    def step(self, x, flag, kernel):
        self.buf.copy_(x)
        if flag:
            kernel(self.buf)
        else:
            self.buf.sum()

    def partly(self, x, flag, kernel):
        if flag:
            self.buf.copy_(x)
        kernel(self.buf)  # read
        if flag: self.buf.fill_(0)
        kernel(self.buf)  # read
        flag and self.buf.fill_(0)
        kernel(self.buf)  # read

    def later(self, x, kernel):
        kernel(self.buf)  # read
        self.buf.copy_(x)
        kernel(self.buf)

    def looped(self, x, kernel):
        for _ in range(3):
            self.buf[:] = x
        kernel(self.buf)  # read
        self.buf[:2] = 0
        kernel(self.buf)  # read
'''
    assert _lines(src) == _marked(src, "read")


def test_an_attribute_of_another_class_is_not_the_buffer():
    """`self.buf` in a class unrelated to the allocating one names another object's attribute; in a base
    or a subclass it may be the same object's."""
    src = '''import torch


class Base:
    def forward(self, kernel):
        return kernel(self.buf)  # read


class Static(Base):
    def __init__(self, n):
        self.buf = torch.zeros(n)  # alloc


class Sub(Static):
    def extra(self, kernel):
        return kernel(self.buf)  # read


class Dynamic(Base):
    def __init__(self, n):
        self.buf = torch.ones(n)

    def update(self, kernel):
        return kernel(self.buf)


class Unrelated:
    def run(self, kernel):
        return kernel(self.buf)
'''
    assert _lines(src) == _marked(src, "read")


@pytest.mark.parametrize("alloc", [
    "torch.from_numpy(np.empty((n, 4), dtype=np.int32))",
    "torch.as_tensor(np.ndarray((n, 4), dtype=np.int32))",
    "torch.tensor([], dtype=torch.int32).set_(torch.UntypedStorage(16 * n))",
    "torch.zeros(0, dtype=torch.int32).resize_(n, 4)",
])
def test_memory_from_outside_aten_is_an_uninitialised_allocation(alloc):
    """numpy's empty arrays, a raw storage and a grown tensor are unwritten as torch.empty's are; an array
    bound first and wrapped later is followed into the tensor (`torch.from_numpy(a)` reads `a`)."""
    src = f'''import numpy as np
import torch

def f(n, idx):
    buf = {alloc}  # alloc
    return buf[idx].sum()  # read
'''
    assert _lines(src) == _marked(src, "read")
    wrapped = '''import numpy as np
import torch

def f(n, idx):
    a = np.empty((n, 4), dtype=np.int32)  # alloc
    t = torch.from_numpy(a)  # read (a copy site, as torch.cat's)
    return t[idx].sum()  # read
'''
    assert _lines(wrapped) == _marked(wrapped, "read")
    zeroed = "import numpy as np\nimport torch\n\ndef f(n):\n    buf = torch.from_numpy(np.zeros(n))  # alloc\n"
    assert read_sites(zeroed, [5]) == {}
