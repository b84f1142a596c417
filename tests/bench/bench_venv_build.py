"""What a task's venv build takes: `python tests/bench/bench_venv_build.py [TASK.toml]`.

Builds the task's `[setup] venv` through `agent.env.interpreter.prepare` into a fresh, empty
PERFAGENT_CACHE_DIR, with pip's download cache fresh and empty too (a build in the sandbox uses
its own scratch cache; one that runs on the host gets PIP_CACHE_DIR, set here), so two builds,
say of this commit and of one before it (`PYTHONPATH=<other checkout>`), start alike. Needs the
package index (the bundled real task pip-installs ~40 packages). Prints one JSON line
{"metric", "value", "unit"}; the build's own progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import agent
from agent.env.interpreter import prepare
from agent.task import load_task

DEFAULT = Path(__file__).resolve().parents[2] / "tasks" / "real" / "sglang-fa-cuda-graph.toml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", nargs="?", type=Path, default=DEFAULT)
    args = parser.parse_args()
    task = load_task(args.task)
    scratch = Path(tempfile.mkdtemp(prefix="perfagent-bench-venv-"))
    os.environ["PERFAGENT_CACHE_DIR"] = str(scratch / "cache")
    os.environ["PIP_CACHE_DIR"] = str(scratch / "pip-cache")
    start = time.monotonic()

    def log(line: str) -> None:
        print(f"[{time.monotonic() - start:6.1f}s] {line}", file=sys.stderr, flush=True)

    try:
        venv = prepare(task, log=log).venv
        seconds = time.monotonic() - start
        size = sum(p.stat().st_size for p in venv.rglob("*") if p.is_file() and not p.is_symlink()) if venv else 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps({"metric": "venv_build_s", "value": round(seconds, 1), "unit": "s", "task": task.spec.id,
                      "venv_gb": round(size / 1e9, 2), "agent": str(Path(agent.__file__).parent)}))


if __name__ == "__main__":
    main()
