"""perfagent check hook, copied as `sitecustomize.py` into a folder put first on PYTHONPATH.

Every Python process a check command starts runs this at start-up:
- PERFAGENT_POISON=1: as soon as torch is imported, turn on deterministic algorithms and
  fill uninitialised memory (NaN for floats, max int for ints), so a buffer read before
  it is written fails the tests. torch is not imported eagerly: processes that never use
  it pay nothing.
- COVERAGE_PROCESS_START: coverage.py measures the process (and its Python children).
Then the sitecustomize this file shadows, if any, still runs. A warm interpreter
(agent/env/zygote.py) imports this once and calls `perfagent_start` in each forked child.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _start_coverage():
    if not os.environ.get("COVERAGE_PROCESS_START"):
        return
    try:
        import coverage

        coverage.process_startup()
    except Exception as e:  # the run goes on; the harness sees no data and says so
        sys.stderr.write(f"perfagent: coverage not started: {e!r}\n")


def _poison(torch):
    torch.use_deterministic_algorithms(True, warn_only=True)
    import torch.utils.deterministic

    torch.utils.deterministic.fill_uninitialized_memory = True


class _AfterTorchImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps torch's loader so `_poison` runs right after torch loads."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_poison(module):
            exec_module(module)
            _poison(module)

        spec.loader.exec_module = exec_then_poison
        return spec


def _chain():
    """Run the next sitecustomize on sys.path (the one this file hides)."""
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None and spec.origin != os.path.abspath(__file__):
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


def perfagent_start():
    """What the environment asks for; a warm interpreter calls it again in each forked child."""
    _start_coverage()
    if os.environ.get("PERFAGENT_POISON") == "1":
        if "torch" in sys.modules:
            _poison(sys.modules["torch"])
        else:
            sys.meta_path.insert(0, _AfterTorchImport())


perfagent_start()
_chain()
