"""Import-time stand-in for Triton (a GPU-only compiler, not installable usefully on a CPU-only machine).

SGLang modules on the import path of the FlashAttention backend define Triton kernels at module level
(`@triton.jit`) and read a few names; none of those kernels runs in this task. Decorated kernels become
objects that raise if anyone launches them, so a code path that really needs Triton fails loudly.
"""

__version__ = "3.2.0"  # what sglang 0.4.6.post5 was built against (torch 2.6 / triton 3.2)


class _Kernel:
    def __init__(self, fn):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = getattr(fn, "__doc__", None)

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            raise RuntimeError(f"Triton kernel {self.__name__} launched: Triton is stubbed out in this CPU harness")

        return launch

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"Triton function {self.__name__} called: Triton is stubbed out in this CPU harness")


def jit(fn=None, **kwargs):
    if fn is None:
        return lambda f: _Kernel(f)
    return _Kernel(fn)


def autotune(*args, **kwargs):
    return lambda f: f


def heuristics(*args, **kwargs):
    return lambda f: f


class Config:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


def cdiv(a, b):
    return -(a // -b)


def next_power_of_2(n):
    n = int(n)
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


from . import language  # noqa: E402,F401
from . import runtime  # noqa: E402,F401
