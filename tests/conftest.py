"""Shared fixtures: small real git repos in temp dirs (built by helpers.py)."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from helpers import make_repo

pytest_plugins = ["fakeserver"]  # the fake_server fixture: a provider's wire format on 127.0.0.1


@pytest.fixture
def small_repo(tmp_path: Path) -> git.Repo:
    return make_repo(tmp_path / "src", {
        "pkg/mod.py": "import torch\n\n\ndef f():\n    return torch.zeros(4)\n",
        "tests/test_mod.py": "from pkg.mod import f\n\n\ndef test_f():\n    assert f().sum() == 0\n",
        "README.md": "hello\n",
    })
