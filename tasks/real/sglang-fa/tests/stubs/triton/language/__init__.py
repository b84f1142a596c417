"""Names SGLang's module-level Triton kernels use in annotations (`tl.constexpr`) or at import time."""


class constexpr:  # used as a type annotation in kernel signatures
    def __init__(self, value=None):
        self.value = value


class dtype:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"triton.language.{self.name}"


for _n in ("int1", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float8e4nv", "float8e5", "float16", "bfloat16", "float32", "float64"):
    globals()[_n] = dtype(_n)


def __getattr__(name):  # tl.arange, tl.load, ... are only referenced inside kernel bodies
    def _unavailable(*args, **kwargs):
        raise RuntimeError(f"triton.language.{name} called: Triton is stubbed out in this CPU harness")

    return _unavailable
