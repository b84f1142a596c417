"""Workspace setup cost on a large repo: `python tests/bench/bench_workspace.py [--files N]`.

Prints JSON lines {"metric", "value", "unit"}: generating the repo is not timed; creating a
workspace (shared clone + checkout), a diff and a reset are.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from agent.env.workspace import Workspace


def generate(root: Path, n: int) -> None:
    for i in range(n):
        d = root / f"pkg{i // 500}" / f"sub{(i // 50) % 10}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"mod{i}.py").write_text(f"def f{i}(x):\n    return x + {i}\n")
    env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@l", "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@l"}
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "big"]):
        subprocess.run(cmd, cwd=root, check=True, env={**env, "PATH": "/usr/bin:/bin"})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where to build (file creation speed of this disk dominates)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        src = Path(tmp) / "big"
        src.mkdir()
        generate(src, args.files)
        times: dict[str, list[float]] = {"create": [], "diff": [], "reset": [], "plain_folder_create": []}
        for r in range(args.repeats):
            t = time.perf_counter()
            ws = Workspace.create(src, "HEAD", Path(tmp) / f"ws{r}")
            times["create"].append(time.perf_counter() - t)
            (ws.root / "pkg0/sub0/mod0.py").write_text("changed\n")
            t = time.perf_counter()
            ws.diff()
            times["diff"].append(time.perf_counter() - t)
            t = time.perf_counter()
            ws.reset()
            times["reset"].append(time.perf_counter() - t)
            ws.cleanup()
        # the same tree as a plain folder (no .git): must snapshot every file once
        subprocess.run(["mv", str(src / ".git"), str(Path(tmp) / "git-aside")], check=True)
        for r in range(min(args.repeats, 2)):
            t = time.perf_counter()
            ws = Workspace.create(src, "HEAD", Path(tmp) / f"plain{r}")
            times["plain_folder_create"].append(time.perf_counter() - t)
            ws.cleanup()
    for name, xs in times.items():
        print(json.dumps({"metric": f"workspace_{name}_ms", "value": round(statistics.median(xs) * 1000, 1),
                          "unit": "ms", "files": args.files, "repeats": len(xs)}))


if __name__ == "__main__":
    main()
