"""`perfagent tasks --json`: the task list as JSON, every file valid or not, with the table's exit code."""

from __future__ import annotations

import json

from agent.cli import main
from helpers import make_tiny_task


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_bundled_tasks_as_json(capsys):
    code, out, err = run(capsys, "tasks", "tasks", "--json")
    assert code == 0, err
    rows = {r["id"]: r for r in json.loads(out)}
    cgb = rows["cuda-graph-buffers"]
    assert cgb["status"] == "ok" and cgb["error"] is None and cgb["title"]
    assert cgb["checks"][:2] == ["correctness", "poison"] and cgb["checks"][2].startswith("perf:")
    assert cgb["repo"].endswith("target_repo") and cgb["file"].endswith("cuda-graph-buffers.toml")
    assert all(set(r) == {"id", "title", "repo", "file", "checks", "status", "error"} for r in rows.values())


def test_an_invalid_task_is_listed_and_exits_2(tmp_path, capsys):
    make_tiny_task(tmp_path, file="good.toml")
    (tmp_path / "bad.toml").write_text('id = "x"\nrepo = "src"\nprompt = "p"\n'
                                       '[correctness]\ncommand = "true"\nturbo = 1\n')
    code, out, err = run(capsys, "tasks", str(tmp_path), "--json")
    assert code == 2
    rows = json.loads(out)
    assert [(r["id"], r["status"], r["checks"]) for r in rows] == [
        (None, "invalid", []), ("tiny", "ok", ["correctness", "poison"])]
    assert "bad.toml" in rows[0]["error"] and "turbo" in rows[0]["error"]
    assert err.startswith("error: ") and "turbo" in err and err.count("\n") == 1
    code, out, err = run(capsys, "tasks", str(tmp_path / "nowhere"), "--json")
    assert code == 2 and out == "" and err.count("\n") == 1
