"""GPU-only vLLM ops that SGLang imports (never called by the FlashAttention backend); each raises if called."""


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def _unavailable(*args, **kwargs):
        raise RuntimeError(f"vllm._custom_ops.{name} called: vLLM GPU ops are stubbed out in this CPU harness")

    _unavailable.__name__ = name
    return _unavailable
