"""Shared fixtures: small real git repos in temp dirs (built by helpers.py)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

# The suite's perf measurements take device locks of their own, never the user-wide ones in
# ~/.cache/perfagent/locks: a test run neither waits behind nor holds up another process's
# measurement. agent.checks.lock reads it whenever a lock is taken; job processes and CLI
# subprocesses inherit it.
if not os.environ.get("PERFAGENT_LOCK_DIR"):
    os.environ["PERFAGENT_LOCK_DIR"] = tempfile.mkdtemp(prefix="perfagent-test-locks-")
    atexit.register(shutil.rmtree, os.environ["PERFAGENT_LOCK_DIR"], True)
# Likewise the evidence key (agent.util.seal): the suite seals and verifies with a key of its own, never
# the user's ~/.local/share/perfagent/evidence.key. Tests that build a HOME of their own and leave this
# out of the environment get a key in that HOME.
if not os.environ.get("PERFAGENT_HOME"):
    os.environ["PERFAGENT_HOME"] = tempfile.mkdtemp(prefix="perfagent-test-home-")
    atexit.register(shutil.rmtree, os.environ["PERFAGENT_HOME"], True)
# The suite runs several workers on few cores, so every torch process it starts shares them: its OpenMP
# threads wait for a core asleep, not spinning (tests/test_real_tasks.py and tests/policies: 358 -> 315
# CPU-s, 214 -> 182 s on 2 cores). The harness passes the variable on (agent.env.sandbox.PASSTHROUGH_ENV).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import git  # noqa: E402
import pytest  # noqa: E402

from agent.cli import main  # noqa: E402
from helpers import Ran, machine_share, make_repo  # noqa: E402

pytest_plugins = ["fakeserver"]  # the fake_server fixture: a provider's wire format on 127.0.0.1


@pytest.fixture
def small_repo(tmp_path: Path) -> git.Repo:
    return make_repo(tmp_path / "src", {
        "pkg/mod.py": "import torch\n\n\ndef f():\n    return torch.zeros(4)\n",
        "tests/test_mod.py": "from pkg.mod import f\n\n\ndef test_f():\n    assert f().sum() == 0\n",
        "README.md": "hello\n",
    })


@pytest.fixture
def perfagent(capsys, monkeypatch):
    """The CLI's main() in-process (a subprocess costs seconds of imports per call), on a wide terminal."""
    monkeypatch.setenv("COLUMNS", "250")

    def call(*args: str) -> Ran:
        code = main(list(args))
        out = capsys.readouterr()
        return Ran(code, out.out, out.err)
    return call


@pytest.fixture(autouse=True)
def _machine_share(request):
    """Under `pytest -n`, a test that measures timings (marked `quiet`) runs alone (helpers.machine_share)."""
    with machine_share(exclusive=request.node.get_closest_marker("quiet") is not None):
        yield


def pytest_collection_modifyitems(items):
    """Slow tests first, the longest (`@pytest.mark.slow(seconds=N)`) before them: under `pytest -n` the
    long ones start while the short ones fill in beside them, instead of one running alone at the end."""
    def order(item):
        slow = item.get_closest_marker("slow")
        return (slow is None, -(slow.kwargs.get("seconds", 0) if slow else 0))
    items.sort(key=order)
