"""What the stub kernels check, and the call tape that stands in for a CUDA graph's frozen kernel arguments."""

from __future__ import annotations

import torch


class KernelContractError(RuntimeError):
    """An input the CUDA kernel would read is out of its contract (garbage, out of range, inconsistent)."""


def first_index(mask: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in mask.nonzero()[0])


def check_finite(name: str, t: torch.Tensor, kernel: str) -> None:
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        idx = first_index(bad)
        raise KernelContractError(f"{name}{list(idx)} = {float(t[idx])} is read ({kernel})")


def check_prefix_sum(name: str, t: torch.Tensor, n: int, limit: int | None, kernel: str) -> list[int]:
    """A cu_seqlens-style tensor: int32, n entries, starts at 0, never decreases, ends at or below `limit`."""
    if t.dtype != torch.int32:
        raise KernelContractError(f"{name} has dtype {t.dtype}, expected torch.int32 ({kernel})")
    if t.dim() != 1 or t.numel() != n:
        raise KernelContractError(f"{name} has shape {tuple(t.shape)}, expected ({n},) ({kernel})")
    vals = t.tolist()
    if vals[0] != 0:
        raise KernelContractError(f"{name}[0] = {vals[0]}, expected 0 ({kernel})")
    for i in range(1, n):
        if vals[i] < vals[i - 1]:
            raise KernelContractError(
                f"{name}[{i}] = {vals[i]} < {name}[{i - 1}] = {vals[i - 1]}: not a prefix sum ({kernel})")
    if limit is not None and vals[-1] > limit:
        raise KernelContractError(f"{name}[{n - 1}] = {vals[-1]} exceeds the {limit} rows it indexes ({kernel})")
    return vals


class Tape:
    """CUDA-graph stand-in for kernel arguments.

    A captured graph replays each kernel with the tensors (addresses, shapes, strides) and Python scalars it saw at
    capture; replay can only change what is stored in those tensors. While recording (the capture run), each kernel
    call appends its argument signature; while checking (a replay), each call is compared with the recorded one, so
    a backend that hands the kernel a different tensor or scalar at replay than at capture (which a real graph
    would silently ignore) is reported.
    """

    def __init__(self) -> None:
        self.mode: str | None = None  # None, "record" or "check"
        self.calls: list[tuple] = []
        self.pos = 0

    def record(self) -> list[tuple]:
        self.mode, self.calls, self.pos = "record", [], 0
        return self.calls

    def check(self, calls: list[tuple]) -> None:
        self.mode, self.calls, self.pos = "check", calls, 0

    def stop(self) -> None:
        if self.mode == "check" and self.pos != len(self.calls):
            mode_calls = len(self.calls)
            self.mode = None
            raise KernelContractError(
                f"replay launched {self.pos} kernels, capture launched {mode_calls} (a CUDA graph replays exactly "
                f"the captured launches)")
        self.mode = None

    def visit(self, kernel: str, sig: tuple) -> None:
        if self.mode == "record":
            self.calls.append((kernel, sig))
        elif self.mode == "check":
            if self.pos >= len(self.calls):
                raise KernelContractError(f"replay launched more kernels than were captured ({kernel})")
            want_kernel, want = self.calls[self.pos]
            self.pos += 1
            if want_kernel != kernel:
                raise KernelContractError(f"replay launched {kernel} where capture launched {want_kernel}")
            for (name, got_v), (_, want_v) in zip(sig, want):
                if got_v != want_v:
                    raise KernelContractError(
                        f"{name} at replay is {describe(got_v)} but was {describe(want_v)} at capture: a CUDA graph "
                        f"would keep reading the captured one ({kernel})")


def describe(v) -> str:
    if isinstance(v, tuple) and len(v) == 4 and v[0] == "tensor":
        return f"tensor@{v[1]:#x} shape {v[2]} stride {v[3]}"
    return repr(v)


def signature(**args) -> tuple:
    out = []
    for name, v in args.items():
        if isinstance(v, torch.Tensor):
            out.append((name, ("tensor", v.data_ptr(), tuple(v.shape), tuple(v.stride()))))
        else:
            out.append((name, v))
    return tuple(out)


TAPE = Tape()
