"""Names `sglang.srt.utils` imports at module level; never used by the FlashAttention backend."""

import os


class FileCacheManager:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("triton.runtime.cache.FileCacheManager: Triton is stubbed out in this CPU harness")


def default_cache_dir():
    return os.path.join(os.path.expanduser("~"), ".triton", "cache")


def default_override_dir():
    return os.path.join(os.path.expanduser("~"), ".triton", "override")


def default_dump_dir():
    return os.path.join(os.path.expanduser("~"), ".triton", "dump")
