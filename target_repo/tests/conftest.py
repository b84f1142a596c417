"""`MINIATTN_POISON=1` fills uninitialised memory (torch.empty & co.) with NaN / the
largest integer, so a buffer read before anything wrote it shows up as a failure."""

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if os.environ.get("MINIATTN_POISON", "0") == "1":
    import torch.utils.deterministic

    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True

torch.set_num_threads(1)  # tiny tensors: threads only add overhead


def pytest_report_header(config):
    poison = torch.are_deterministic_algorithms_enabled() and torch.utils.deterministic.fill_uninitialized_memory
    from miniattn import get_device

    return f"miniattn: device={get_device()} poison={'on' if poison else 'off'}"
