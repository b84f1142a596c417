"""Import-time stand-in for vLLM's GPU custom ops.

On a machine where `torch.cuda.is_available()` is False, `sglang.srt.utils.is_cuda()` is False and a few SGLang
modules on the backend's import path (e.g. `sglang.srt.layers.quantization.utils`) import CUDA/ROCm kernels from
`vllm._custom_ops` instead of `sgl_kernel`. Only `vllm._custom_ops` exists here; every op raises when called.
Anything else under `vllm` raises ImportError, so SGLang's `try: import vllm... except ImportError` probes see
"vLLM not installed".
"""
