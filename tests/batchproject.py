"""A tiny batch project the batch tests share (local and Ray executors, and bench_ray.py): a target whose
"cost" is a constant its bench prints, three tasks and replay trajectories that edit it."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import make_repo

MOD = "COST = 10.0\n\n\ndef f():\n    return COST\n"
BENCH = ("import json\nimport random\n\nimport mod\n\n"
         'print(json.dumps({"metric": "ms", "value": mod.f() * (1 + random.random() * 0.02)}))\n')
REF = """diff --git a/mod.py b/mod.py
--- a/mod.py
+++ b/mod.py
@@ -1,4 +1,4 @@
-COST = 10.0
+COST = 4.0
\x20
\x20
 def f():
"""
TASK = '''id = "{id}"
repo = "src"
prompt = "Make f cheaper."
protected = ["bench.py"]
requires_gpu = {gpu}
[correctness]
command = "python -c 'import mod; assert mod.f() > 0'"
poison = false
{perf}{ref}[budget]
max_turns = 3
'''
PERF = '[perf]\ncommand = "python bench.py"\nmetric = "ms"\n'


def edit(new: str) -> dict:
    return {"id": "e", "name": "edit_file", "input": {"path": "mod.py", "old": "COST = 10.0", "new": f"COST = {new}"}}


def call(name: str, **inp) -> dict:
    return {"id": name[:2], "name": name, "input": inp}


def trajectory(path: Path, *turns: list[dict]) -> str:
    path.write_text("".join(json.dumps({"type": "response", "tool_calls": calls}) + "\n" for calls in turns))
    return f"replay:{path}"


def build_project(root: Path) -> tuple[Path, Path, dict[str, str]]:
    """Tasks t1 (perf + reference), t2 (no perf), tgpu (requires a GPU); replays good (2.5x = the
    reference), bad (breaks the check), slow (sleeps first), gpu (echoes its device)."""
    make_repo(root / "src", {"mod.py": MOD, "bench.py": BENCH})
    (root / "ref.diff").write_text(REF)
    tasks = root / "tasks"
    tasks.mkdir()
    for tid, gpu, perf, ref in (("t1", "false", PERF, '[reference]\npatch = "ref.diff"\n'), ("t2", "false", "", ""),
                                ("tgpu", "true", "", "")):
        (tasks / f"{tid}.toml").write_text(TASK.format(id=tid, gpu=gpu, perf=perf, ref=ref))
    models = {
        "good": trajectory(root / "good.jsonl", [edit("4.0")], [call("submit", summary="cheaper")]),
        "bad": trajectory(root / "bad.jsonl", [edit("-1.0")], *[[call("submit", summary="x")]] * 2),
        "slow": trajectory(root / "slow.jsonl", [call("run", command="sleep 4")], [edit("4.0")],
                           [call("submit", summary="cheaper")]),
        "gpu": trajectory(root / "gpu.jsonl", [call("run", command="echo DEVICE=$CUDA_VISIBLE_DEVICES")],
                          [edit("4.0")], [call("submit", summary="cheaper")]),
    }
    return root, tasks, models


def ledger_lines(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "batch.jsonl").read_text().splitlines()]

