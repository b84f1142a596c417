"""The sandbox spec: what a task's commands may see is one value built from the task and passed in, never
an environment variable the command carries (and could rewrite) that the harness reads back."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from agent.checks.sides import Sides
from agent.env.sandbox import (ResourceLimits, SandboxSpec, base_env, hidden_paths, isolation, run_command,
                               sealed_argv)
from helpers import make_task

sealed = pytest.mark.skipif(isolation().mode != "bwrap", reason="bubblewrap is not usable on this machine")
LIMITS = ResourceLimits(memory_bytes=1 << 30)


def binds(argv: list[str], flag: str) -> set[str]:
    """The folders a bubblewrap command line mounts with `flag` (where the sandbox shows them)."""
    return {argv[i + 2] for i, word in enumerate(argv) if word == flag}


def argv_of(spec: SandboxSpec, cwd: Path, env: dict[str, str] | None = None) -> list[str]:
    return sealed_argv("true", cwd, "bwrap", spec, base_env() if env is None else env, LIMITS, 10)


@pytest.fixture
def task_with_data(tmp_path):
    data = tmp_path / "weights"
    data.mkdir()
    (data / "w.txt").write_text("the-weights-bytes\n")
    task, _ = make_task(tmp_path, extra=f'read = ["{data}"]\n')
    return task, data


def test_a_tasks_spec_shows_its_read_folders_read_only_and_its_own_folders_writable(task_with_data, tmp_path):
    task, data = task_with_data
    spec = SandboxSpec.for_task(task)
    assert spec.read == (data,) and not spec.writable and not spec.network
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir(), out.mkdir()
    argv = argv_of(spec.with_(writable=(out,)), work)
    assert str(data) in binds(argv, "--ro-bind-try") and str(data) not in binds(argv, "--bind")
    assert binds(argv, "--bind") == {str(work), str(out)}
    assert str(task.file.parent) not in binds(argv, "--ro-bind-try")  # the task folder is not shown
    assert "--unshare-net" in argv and "--unshare-net" not in argv_of(dataclasses.replace(spec, network=True), work)
    assert spec.with_(writable=(out,)) != spec and not spec.writable  # a call's folders widen a copy only


def test_a_read_folder_the_system_folders_hold_is_not_mounted_again(tmp_path):
    argv = argv_of(SandboxSpec(read=(Path("/"), Path("/usr/lib"), tmp_path / "missing")), tmp_path)
    assert {"/", "/usr/lib", str(tmp_path / "missing")}.isdisjoint(binds(argv, "--ro-bind-try"))


def test_no_read_folder_travels_in_the_environment(task_with_data, tmp_path):
    """The old channel: the folders rode in PERFAGENT_READ, parsed back when the sandbox was built. Now a
    command's environment names none, and naming one there shows the command nothing."""
    task, data = task_with_data
    sides = Sides(task, tmp_path / "work", log=lambda _: None, warm=False)
    root = tmp_path / "root"
    root.mkdir()
    for env in (sides.command_env(root), sides.test_env(root)):
        assert "PERFAGENT_READ" not in env and not any(str(data) in v for v in env.values()), env
    assert sides.sandbox == SandboxSpec.for_task(task)
    smuggled = {**base_env(), "PERFAGENT_READ": str(data)}
    assert str(data) not in binds(argv_of(SandboxSpec(), root, smuggled), "--ro-bind-try")
    assert str(data) in binds(argv_of(sides.sandbox, root, base_env()), "--ro-bind-try")


@sealed
def test_a_command_reads_the_tasks_folder_only_through_its_spec(task_with_data, tmp_path):
    task, data = task_with_data
    spec = SandboxSpec.for_task(task)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    shown = run_command(f"cat {data}/w.txt && echo x > {data}/new", cwd, sandbox=spec, timeout_s=30)
    assert "the-weights-bytes" in shown.output and not shown.ok and not (data / "new").exists(), shown.output
    hidden = run_command(f"cat {data}/w.txt", cwd, env={**base_env(), "PERFAGENT_READ": str(data)}, timeout_s=30)
    assert not hidden.ok and "the-weights-bytes" not in hidden.output, hidden.output
    assert hidden_paths(f"cat {data}/w.txt", cwd, base_env()) == [f"{data}/w.txt"]
    assert hidden_paths(f"cat {data}/w.txt", cwd, base_env(), spec) == []
