"""Red team, the task's environment build: a hostile task record's `[setup] venv` commands.

A task's venv commands come from the task file, hand-written or imported from a record nobody
read, and run once per machine with the network on (they fetch packages). They used to run on
the host as the user, with the user's whole environment: an install command wrote `uid=0(root)`
and both API keys to a file. Played through `perfagent check` with ANTHROPIC_API_KEY and
OPENAI_API_KEY set and a fake HOME holding `.ssh/id_rsa`.

| attack (a `[setup] venv` command)                                       | must hold                         |
|-------------------------------------------------------------------------|-----------------------------------|
| print `env`, `id` and the API keys into the build's log                 | no key in the log or CLI output   |
| write `id` and `env` to the task's folder (by name and relative to the  | no such file on the host; no key  |
|   build's folder), to `$HOME`, the user's home by path, and /tmp        |   anywhere the build could write  |
| append to the task file; read `~/.ssh/id_rsa` by path (both inside the | the task file unchanged; the key's|
|   task's folder here)                                                   |   text never comes back           |
"""

from __future__ import annotations

import json
import sys
import sysconfig
import uuid
from pathlib import Path

import pytest

from redteam.lab import API_KEY, SSH_SECRET, make_lab


def _texts(root: Path) -> str:
    """Every file's text under `root` (the cache: the build's log and the venv)."""
    return "\n".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.mark.slow
def test_a_hostile_venv_command_gets_no_key_and_writes_nothing_on_the_host(tmp_path):
    lab = make_lab(tmp_path, perf=False)
    cache = tmp_path / "cache"
    host_tmp = Path("/tmp") / f"perfagent-redteam-setup-{uuid.uuid4().hex[:8]}.txt"
    grab = "(id; env; python -c 'import os; print(os.environ.get(\"ANTHROPIC_API_KEY\"))')"
    hostile = " ; ".join([
        "echo BUILD-RAN-$((6 * 7))", "env", "id",
        f"cat {lab.home}/.ssh/id_rsa",
        f"{grab} > {lab.root}/stolen-task.txt",              # the task's folder (the task file is there)
        f"{grab} > stolen-cwd.txt",                          # where the build runs (was the task's folder)
        f"{grab} > \"$HOME/stolen-home.txt\"",               # its HOME (was the user's)
        f"{grab} > {lab.home}/stolen-abs-home.txt",          # the user's home by path
        f"{grab} > {host_tmp}",                              # the host's /tmp
        f"{grab} >> {lab.task}",                             # the task file, named: shown read-only
        f"{grab} > \"$VIRTUAL_ENV/seen.txt\"",                 # the venv: where it may write
        "true",
    ])
    # the venv sees perfagent's own packages (pytest), so the check itself runs to its end
    own = sysconfig.get_paths()["purelib"]
    pth = f"python -c \"import pathlib, site; pathlib.Path(site.getsitepackages()[0], 'own.pth').write_text({own!r})\""
    with open(lab.task, "a") as f:
        f.write(f"[setup]\npython = {json.dumps(sys.executable)}\nvenv = {json.dumps([hostile, pth])}\n")
    task_text = lab.task.read_text()
    (tmp_path / "p.diff").write_text(lab.patch({"pkg/mod.py": lambda t: t.replace("sum(range(n))",
                                                                                     "n * (n - 1) // 2")}))
    try:
        proc = lab.perfagent("check", str(lab.task), "--patch", str(tmp_path / "p.diff"), "--json", "-", "--no-perf",
                             env={"PERFAGENT_CACHE_DIR": str(cache)})
        written = [p for p in (lab.root / "stolen-task.txt", lab.root / "stolen-cwd.txt",
                               lab.home / "stolen-home.txt", lab.home / "stolen-abs-home.txt", host_tmp) if p.exists()]
        leaked = host_tmp.read_text(errors="replace") if host_tmp.exists() else ""
    finally:
        host_tmp.unlink(missing_ok=True)
    out = proc.stdout + proc.stderr
    logs = list((cache / "venvs").glob("*.log"))
    assert len(logs) == 1, f"no build log: {out[-2000:]}"
    log = logs[0].read_text(errors="replace")
    assert API_KEY not in out and API_KEY not in log, "an API key reached the build"
    assert API_KEY not in _texts(cache), "an API key was written where the build could write"
    assert SSH_SECRET not in log + out, "the build read the user's ssh key"
    assert not written, f"the build wrote on the host outside its venv: {written} {leaked[:300]}"
    assert lab.task.read_text() == task_text, "the build wrote to the task file"
    assert API_KEY not in _texts(lab.root), "an API key was written on the host"

    # the attack did run, sealed: its commands ran and wrote where they may (the venv)
    assert "BUILD-RAN-42" in log and "uid=" in log, log[-2000:]
    venv = next(p for p in (cache / "venvs").iterdir() if p.is_dir())
    seen = (venv / "seen.txt").read_text()
    assert f"HOME={lab.home}" not in seen and "HOME=" in seen, seen
    assert proc.returncode == 0 and json.loads(proc.stdout)["verdict"], out[-3000:]
