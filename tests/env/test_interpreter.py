"""A task's own Python: a named interpreter, or a venv built once from `[setup] venv` and reused."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from agent.checks import Checker
from agent.env.interpreter import READY, InterpreterError, prepare
from agent.env.sandbox import SandboxSpec, isolation, run_command
from agent.task import TaskError, load_task
from tests.helpers import make_repo

# The venv's commands put a module into it that only the venv has; the test and the bench import it.
MARK = ("python -c \"import site, pathlib; "
        "pathlib.Path(site.getsitepackages()[0], 'only_in_venv.py').write_text('WHO = 7')\"")
FILES = {
    "lib.py": "def value():\n    return 1\n",
    "tests/check.py": "import only_in_venv, sys\nassert only_in_venv.WHO == 7\nprint(sys.prefix)\n",
    "bench/run.py": ("import json, only_in_venv\n"
                     "print(json.dumps({'metric': 'ms', 'value': 1.0 + only_in_venv.WHO}))\n"),
}
PATCH = "--- a/lib.py\n+++ b/lib.py\n@@ -1,2 +1,2 @@\n def value():\n-    return 1\n+    return 2\n"


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("PERFAGENT_CACHE_DIR", str(cache))
    return cache


def write_task(tmp_path: Path, setup: str) -> Path:
    if not (tmp_path / "repo").exists():
        make_repo(tmp_path / "repo", FILES)
    task = tmp_path / "task.toml"
    task.write_text('id = "venv"\nrepo = "repo"\nprompt = "p"\nprotected = ["tests/**", "bench/**"]\n'
                    f'[setup]\n{setup}\n[correctness]\ncommand = "python tests/check.py"\npoison = false\n'
                    '[perf]\ncommand = "python bench/run.py"\nmetric = "ms"\n')
    return task


@pytest.mark.slow
def test_venv_is_built_once_and_used_by_tests_and_bench(tmp_path: Path, own_cache: Path) -> None:
    task = load_task(write_task(tmp_path, f"venv = [{json.dumps(MARK)}]"))
    said: list[str] = []
    with Checker(task, tmp_path / "work", log=said.append) as checker:
        ev = checker.evaluate(PATCH, quick=True)
        venv = checker.sides.interpreter().venv
    assert venv is not None and venv.parent == own_cache / "venvs" and (venv / READY).is_file()
    assert ev.correctness.plain.passed, ev.correctness.plain.output_tail
    assert str(venv) in ev.correctness.plain.output_tail, "the test ran with the venv's python"
    assert ev.perf.baseline_median == 8.0, "the bench ran with the venv's python"
    assert any("building the task's venv" in m for m in said)

    said.clear()
    again = prepare(task, log=said.append)
    assert again.venv == venv and not said, "the second run reuses the venv without a word"

    changed = load_task(write_task(tmp_path, f"venv = [{json.dumps(MARK + ' # v2')}]"))
    assert prepare(changed).venv != venv, "another command is another venv"


@pytest.mark.slow
def test_a_failing_venv_command_is_one_line_and_leaves_nothing(tmp_path: Path, own_cache: Path) -> None:
    task = load_task(write_task(tmp_path, 'venv = ["echo fetching; echo no such package >&2; exit 3"]'))
    with pytest.raises(InterpreterError) as e:
        prepare(task)
    msg = str(e.value)
    assert "\n" not in msg and "exit 3" in msg and "no such package" in msg
    assert not any(p.is_dir() for p in (own_cache / "venvs").iterdir()), "no half-built venv stays"

    (tmp_path / "p.diff").write_text(PATCH)
    res = subprocess.run([sys.executable, "-m", "agent", "check", str(task.file), "--patch", "p.diff"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode != 0 and "Traceback" not in res.stderr + res.stdout
    assert "exit 3" in res.stdout + res.stderr


def test_a_named_interpreter_is_what_python_means(tmp_path: Path) -> None:
    """`python = ...` without a venv: the task's commands get that interpreter as `python`."""
    make_repo(tmp_path / "repo", {**FILES, "tests/check.py": "import sys\nprint('PREFIX', sys.base_prefix)\n"})
    base = subprocess.run([sys.executable, "-c", "import sys; print(sys.base_prefix)"], capture_output=True,
                          text=True).stdout.strip()
    python = Path(base) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    task = load_task(write_task(tmp_path, f'python = "{python}"'))
    interp = prepare(task)
    assert interp.bin_dir is not None and Path(interp.python).resolve() == python.resolve()
    with Checker(task, tmp_path / "work") as checker:
        ev = checker.evaluate(PATCH, perf=False)
    assert f"PREFIX {base}" in ev.correctness.plain.output_tail


def test_a_relative_interpreter_path_keeps_the_venv_it_names(tmp_path: Path) -> None:
    """`python = "tv/bin/python"` beside the task file: that venv's packages are what the tests import.
    Its `bin/python` is a link to the base interpreter; followed, the venv (and its packages) is lost."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "tv")], check=True)
    site = next((tmp_path / "tv").glob("lib/python3*/site-packages"))
    (site / "only_in_venv.py").write_text("WHO = 7\n")
    assert (tmp_path / "tv" / "bin" / "python").is_symlink()
    task = load_task(write_task(tmp_path, 'python = "tv/bin/python"'))
    interp = prepare(task)
    assert interp.bin_dir == tmp_path / "tv" / "bin", interp
    with Checker(task, tmp_path / "work") as checker:
        ev = checker.evaluate(PATCH, perf=False)
    assert ev.correctness.plain.passed, ev.correctness.plain.output_tail
    assert str(tmp_path / "tv") in ev.correctness.plain.output_tail, "sys.prefix is the venv"


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="perfagent runs in no virtual environment here")
def test_python3_by_name_is_never_perfagents_own_venv(tmp_path: Path, monkeypatch) -> None:
    """With perfagent's venv active (first on PATH), `python = "python3"` is the machine's python3, said so."""
    own = Path(sys.prefix) / "bin"
    monkeypatch.setenv("PATH", f"{own}{os.pathsep}{os.environ.get('PATH', '')}")
    if shutil.which("python3", path=os.environ["PATH"].split(os.pathsep, 1)[1]) is None:
        pytest.skip("no python3 on PATH outside perfagent's venv")
    said: list[str] = []
    interp = prepare(load_task(write_task(tmp_path, 'python = "python3"')), log=said.append)
    chosen = Path(interp.python)
    assert own not in chosen.parents and own not in chosen.resolve().parents, chosen
    assert any(line.startswith("the task's python: python3 is /") for line in said), said


@pytest.mark.parametrize("setup, problem", [
    ('python = "no-such-python-9"', "interpreter not found: no-such-python-9"),
    ('python = "/bin/sh"', "does not run as a Python interpreter"),
])
def test_a_bad_interpreter_is_named(tmp_path: Path, setup: str, problem: str) -> None:
    task = load_task(write_task(tmp_path, setup))
    with pytest.raises(InterpreterError, match=problem):
        prepare(task)


def test_setup_needs_something(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="setup.*at least one of python, venv, command"):
        load_task(write_task(tmp_path, "timeout_s = 5"))


@pytest.mark.slow
def test_a_candidate_cannot_plant_code_in_the_shared_venv(tmp_path: Path) -> None:
    """Red team: the venv is cached and shared by every later run, so a hostile candidate's code tries
    to drop a .pth file (run at every interpreter start) into it while the tests run. The sandbox
    mounts the venv read-only: the write fails, and nothing lands there."""
    task = load_task(write_task(tmp_path, f"venv = [{json.dumps(MARK)}]"))
    venv = prepare(task).venv
    site = next(venv.glob("lib/python3*/site-packages"))
    planted = site / "zz_planted.pth"
    attack = (f"--- a/lib.py\n+++ b/lib.py\n@@ -1,2 +1,6 @@\n+try:\n"
              f"+    open({str(planted)!r}, 'w').write('import os')\n+except OSError as e:\n+    print('BLOCKED', e)\n"
              " def value():\n     return 1\n")
    make_repo(tmp_path / "repo2", {**FILES, "tests/check.py": "import lib, only_in_venv\n"})
    (tmp_path / "task.toml").write_text((tmp_path / "task.toml").read_text().replace('repo = "repo"', 'repo = "repo2"'))
    with Checker(load_task(tmp_path / "task.toml"), tmp_path / "work") as checker:
        ev = checker.evaluate(attack, perf=False)
    assert "BLOCKED" in ev.correctness.plain.output_tail, ev.correctness.plain.output_tail
    assert not planted.exists()


def test_a_long_build_step_says_how_it_goes(tmp_path: Path) -> None:
    """A first SGLang build is minutes of pip: the step's time and last line are told as it runs, and a
    step past its time limit is stopped."""
    from agent.env.interpreter import _step

    said: list[str] = []
    logfile = tmp_path / "build.log"
    logfile.write_text("")
    code = _step("echo Collecting torch; sleep 0.6; echo Installing; sleep 0.6", cwd=tmp_path, env=dict(os.environ),
                 logfile=logfile, timeout_s=30, log=said.append, tick_s=0.25)
    assert code == 0
    assert any(m.endswith(": Collecting torch") for m in said) and any(m.endswith(": Installing") for m in said)
    assert all(m.startswith("venv: ") and "s: " in m for m in said), said
    start = time.monotonic()
    code = _step("sleep 30", cwd=tmp_path, env=dict(os.environ), logfile=logfile, timeout_s=0.5,
                 log=said.append, tick_s=0.25)
    assert code is None and time.monotonic() - start < 10


# -- the build is sealed: an allow-listed environment, a scratch HOME, network only for it ---------
SECRETS = {"ANTHROPIC_API_KEY": "sk-ant-build-secret", "OPENAI_API_KEY": "sk-oai-build-secret",
           "SOME_SERVICE_TOKEN": "tok-build-secret"}  # a name no deny-list would know


def test_a_build_step_sees_an_allow_list_and_a_home_of_its_own(tmp_path: Path, own_cache: Path,
                                                               tmp_path_factory: pytest.TempPathFactory,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Red team: a venv command prints its environment and reads the user's home; it sees no secret,
    a scratch HOME (gone after the build) and pip's cache there, and the locale it was given."""
    home = tmp_path_factory.mktemp("home")
    (home / "secret.txt").write_text("HOME-SECRET")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("LANG", "C.UTF-8")
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    probe = (f'env > "$VIRTUAL_ENV/seen-env"; cat {home}/secret.txt "$HOME/secret.txt" > "$VIRTUAL_ENV/seen-home" '
             '2>&1; echo "home: $HOME"; pip --version')
    venv = prepare(load_task(write_task(tmp_path, f"venv = [{json.dumps(probe)}]"))).venv
    assert venv is not None
    seen = dict(line.split("=", 1) for line in (venv / "seen-env").read_text().splitlines() if "=" in line)
    log = (venv.parent / f"{venv.name}.log").read_text()
    for name, value in SECRETS.items():
        assert name not in seen and value not in log, name
    assert "HOME-SECRET" not in (venv / "seen-home").read_text()
    scratch = venv.parent / f"{venv.name}.build"
    assert seen["HOME"] == str(scratch / "home") and seen["PIP_CACHE_DIR"] == str(scratch / "pip-cache"), seen
    assert seen["LANG"] == "C.UTF-8" and seen["PATH"].startswith(f"{venv}/bin:") and seen["VIRTUAL_ENV"] == str(venv)
    assert "pip " in log and not scratch.exists(), "the scratch HOME and pip cache go with the build"


def _server() -> tuple[socket.socket, list[int]]:
    """A TCP server on 127.0.0.1 in the host's network namespace, counting the connections it accepts."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    accepted: list[int] = []

    def serve() -> None:
        while server.fileno() != -1:
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(1)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return server, accepted


def test_a_sandboxed_command_has_the_network_only_when_asked(tmp_path: Path) -> None:
    """`run_command`'s network is off by default (a server on the host's 127.0.0.1 is out of reach)
    and kept with `network=True` (what only a venv build asks for)."""
    if isolation().mode == "none":
        pytest.skip("no network namespace on this machine")
    server, accepted = _server()
    port = server.getsockname()[1]
    probe = (f"{sys.executable} -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); "
             "print('CONNECTED')\"")
    try:
        sealed = run_command(probe, tmp_path, timeout_s=60)
        assert not sealed.ok and "CONNECTED" not in sealed.output and not accepted, sealed.output
        opened = run_command(probe, tmp_path, timeout_s=60, sandbox=SandboxSpec(network=True))
        assert opened.ok and "CONNECTED" in opened.output, opened.output
        deadline = time.monotonic() + 5
        while not accepted and time.monotonic() < deadline:
            time.sleep(0.05)
        assert accepted == [1]
    finally:
        server.close()


@pytest.mark.slow
def test_a_build_has_the_network(tmp_path: Path, own_cache: Path) -> None:
    """The venv build keeps the network (its commands fetch packages): the same server is reached."""
    if isolation().mode == "none":
        pytest.skip("no network namespace on this machine")
    server, accepted = _server()
    port = server.getsockname()[1]
    reach = f"python -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)\""
    try:
        prepare(load_task(write_task(tmp_path, f"venv = [{json.dumps(reach)}]")))
        assert accepted == [1]
    finally:
        server.close()


def _wheel(folder: Path) -> None:
    """A one-module wheel written by hand (no build backend, no index)."""
    folder.mkdir()
    info = "tinydep-0.1.dist-info"
    files = {"tinydep.py": "VALUE = 5\n",
             f"{info}/METADATA": "Metadata-Version: 2.1\nName: tinydep\nVersion: 0.1\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(folder / "tinydep-0.1-py3-none-any.whl", "w") as whl:
        for name, text in files.items():
            whl.writestr(name, text)


@pytest.mark.slow
def test_a_requirements_file_in_the_task_folder_installs_read_only(tmp_path: Path, own_cache: Path) -> None:
    """A hand-written task installs from its own folder (`-r requirements.txt`, a wheels folder): the
    files the command names are shown read-only; the rest of the folder (the task file, its reference
    patches) is not there, and nothing is written into it."""
    _wheel(tmp_path / "wheels")
    (tmp_path / "requirements.txt").write_text("tinydep==0.1\n")
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "ref.diff").write_text("the answer\n")
    install = ("pip install --no-index --find-links wheels -r requirements.txt && "
               "{ touch written; ls -A .; cat patches/ref.diff; } > \"$VIRTUAL_ENV/seen\" 2>&1; true")
    venv = prepare(load_task(write_task(tmp_path, f"venv = [{json.dumps(install)}]"))).venv
    assert venv is not None
    ran = subprocess.run([str(venv / "bin" / "python"), "-c", "import tinydep; print(tinydep.VALUE)"],
                         capture_output=True, text=True)
    assert ran.stdout.strip() == "5", ran.stderr
    seen = (venv / "seen").read_text()
    listed = set(seen.split())
    assert {"requirements.txt", "wheels"} <= listed and not {"task.toml", "patches", "repo"} & listed, seen
    assert "the answer" not in seen and not (tmp_path / "written").exists(), seen


def test_only_plain_names_inside_the_task_folder_are_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a build step may see of the task's folder: what it names there, never past a hidden name,
    out through `..` or a link, nor a folder holding the user's home."""
    from agent.env.interpreter import _task_paths

    task = tmp_path / "task"
    for name in ("requirements.txt", "wheels/a.whl", ".ssh/id_rsa", "home/.netrc"):
        (task / name).parent.mkdir(parents=True, exist_ok=True)
        (task / name).write_text("x")
    (tmp_path / "outside.txt").write_text("x")
    (task / "link.txt").symlink_to(tmp_path / "outside.txt")
    monkeypatch.setenv("HOME", str(task / "home"))
    step = (f"pip install -rrequirements.txt --find-links=./wheels -c {task}/.ssh/id_rsa ../outside.txt link.txt "
            "home . missing.txt")
    assert _task_paths(step, task) == (task / "requirements.txt", task / "wheels")
