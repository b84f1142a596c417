import os

import torch


def get_device() -> torch.device:
    """`MINIATTN_DEVICE` if set, else CUDA when available, else CPU."""
    name = os.environ.get("MINIATTN_DEVICE")
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
