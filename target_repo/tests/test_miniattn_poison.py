import pytest
import torch

from miniattn_world import poisoned


@pytest.mark.skipif(not poisoned(), reason="MINIATTN_POISON=1 not set")
def test_poison_mode_fills_uninitialised_memory():
    assert torch.isnan(torch.empty(16)).all()
    assert (torch.empty(16, dtype=torch.int32) == torch.iinfo(torch.int32).max).all()
