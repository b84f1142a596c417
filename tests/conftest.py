"""Shared fixtures: small real git repos in temp dirs."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

AUTHOR = git.Actor("test", "test@localhost")


def make_repo(path: Path, files: dict[str, str], message: str = "init") -> git.Repo:
    """A real git repo at `path` with `files` committed."""
    repo = git.Repo.init(path)
    for name, text in files.items():
        f = path / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    repo.index.add(list(files))
    repo.index.commit(message, author=AUTHOR, committer=AUTHOR)
    return repo


@pytest.fixture
def small_repo(tmp_path: Path) -> git.Repo:
    return make_repo(tmp_path / "src", {
        "pkg/mod.py": "import torch\n\n\ndef f():\n    return torch.zeros(4)\n",
        "tests/test_mod.py": "from pkg.mod import f\n\n\ndef test_f():\n    assert f().sum() == 0\n",
        "README.md": "hello\n",
    })
