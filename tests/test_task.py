from __future__ import annotations

from pathlib import Path

import pytest

from agent.env.workspace import check_task_base, checked_bases
from agent.task import TaskError, load_task, load_task_set, task_files

GOOD = '''
id = "t1"
title = "demo"
repo = "src"
base = "HEAD"
prompt = "make it fast"
focus = ["pkg/mod.py"]
protected = ["tests/**"]

[correctness]
command = "python -m pytest -q tests"

[perf]
command = "python bench.py"
metric = "ms"
'''


def write(p: Path, text: str) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def test_valid_task_resolves_repo_walking_up(tmp_path, small_repo):
    f = write(tmp_path / "tasks" / "t1.toml", GOOD)
    task = load_task(f)
    assert task.id == "t1"
    assert Path(task.repo) == Path(small_repo.working_tree_dir).resolve()
    assert task.spec.correctness.poison is True  # poison is on by default
    assert task.spec.perf.direction == "lower"
    assert task.spec.budget.max_turns == 40


@pytest.mark.parametrize("mutate, field, what", [
    (lambda s: s + 'colour = "red"\n', "colour", "unknown key"),
    (lambda s: s.replace('metric = "ms"', 'metric = "ms"\ndirection = "sideways"'), "perf.direction", "sideways"),
    (lambda s: s.replace('command = "python -m pytest -q tests"', ''), "correctness.command", "missing"),
    (lambda s: s.replace('focus = ["pkg/mod.py"]', 'focus = "pkg/mod.py"'), "focus", "list"),
    (lambda s: s.replace('repo = "src"', 'repo = "nowhere"'), "repo", "path not found"),
    (lambda s: s + '[reference]\npatch = "missing.diff"\n', "reference.patch", "not found"),
    (lambda s: s.replace('id = "t1"', 'id = "has space"'), "id", "pattern"),
    (lambda s: s + "[budget]\nmax_turns = 0\n", "budget.max_turns", "greater than 0"),
])
def test_errors_name_file_field_and_problem(tmp_path, small_repo, mutate, field, what):
    f = write(tmp_path / "tasks" / "bad.toml", mutate(GOOD))
    with pytest.raises(TaskError) as exc:
        load_task(f)
    msg = str(exc.value)
    assert "\n" not in msg
    assert str(f) in msg and field in msg and what in msg


def test_unknown_base_is_found_where_the_task_is_used(tmp_path, small_repo):
    """Loading reads only the file; the base commit is checked by whoever uses the task, in the same one-line form."""
    f = write(tmp_path / "tasks" / "bad.toml", GOOD.replace('base = "HEAD"', 'base = "deadbeef"'))
    task = load_task(f)
    with pytest.raises(TaskError) as exc:
        check_task_base(task)
    msg = str(exc.value)
    assert "\n" not in msg
    assert str(f) in msg and "base" in msg and "unknown commit 'deadbeef'" in msg
    [entry] = checked_bases([task])
    assert isinstance(entry, TaskError) and str(entry) == msg
    check_task_base(load_task(write(tmp_path / "tasks" / "good.toml", GOOD)))


def test_invalid_toml_and_missing_file(tmp_path):
    f = write(tmp_path / "broken.toml", "id = \n")
    with pytest.raises(TaskError, match="not valid TOML"):
        load_task(f)
    with pytest.raises(TaskError, match="not found"):
        load_task(tmp_path / "nope.toml")


def test_plain_folder_only_allows_head(tmp_path):
    (tmp_path / "plain").mkdir()
    f = write(tmp_path / "t.toml",
              GOOD.replace('repo = "src"', 'repo = "plain"').replace('base = "HEAD"', 'base = "v1"'))
    with pytest.raises(TaskError, match="base: .*not a git repository"):
        check_task_base(load_task(f))


def test_git_url_is_not_resolved_locally(tmp_path):
    f = write(tmp_path / "t.toml", GOOD.replace('repo = "src"', 'repo = "https://example.invalid/x.git"'))
    assert load_task(f).repo_is_url


def test_task_sets_file_and_directory(tmp_path, small_repo):
    write(tmp_path / "tasks" / "a.toml", GOOD)
    write(tmp_path / "tasks" / "b.toml", GOOD.replace('"t1"', '"t2"').replace("python -m pytest -q tests", ""))
    write(tmp_path / "tasks" / "set.toml", 'tasks = ["a.toml"]\n')
    assert [p.name for p in task_files(tmp_path / "tasks")] == ["a.toml", "b.toml"]
    assert [p.name for p in task_files(tmp_path / "tasks" / "set.toml")] == ["a.toml"]
    entries = load_task_set(tmp_path / "tasks")
    assert entries[0].id == "t1"
    assert isinstance(entries[1], TaskError) and "correctness.command" in str(entries[1])


def test_every_validation_error_is_listed_on_one_line(tmp_path, small_repo):
    """Five mistakes in one file: all five named (not "1 of 5"), each FILE: FIELD: problem."""
    text = (GOOD.replace('id = "t1"', 'id = "has space"').replace('focus = ["pkg/mod.py"]', 'focus = "pkg/mod.py"')
            .replace('command = "python -m pytest -q tests"', '')
            .replace('title = "demo"', 'title = "demo"\ncolour = "red"')
            + '[budget]\nmax_turns = 0\n')
    f = write(tmp_path / "tasks" / "bad.toml", text)
    with pytest.raises(TaskError) as exc:
        load_task(f)
    msg = str(exc.value)
    assert "\n" not in msg and "more)" not in msg
    parts = msg.split("; ")
    assert len(parts) == 5
    assert all(p.startswith(f"{f}: ") for p in parts)
    fields = sorted(p[len(str(f)) + 2:].split(": ", 1)[0] for p in parts)
    assert fields == ["budget.max_turns", "colour", "correctness.command", "focus", "id"]
