"""A task as bytes, for a worker that shares no filesystem with the batch (the Ray executor).

A task file names paths of the machine it was written on: its repo, its reference patch. A
Ray worker may be another machine, so the batch packs what a job needs (`pack_task`): the task
file's document, the repo at its base commit (a git bundle, so the base keeps its sha; a plain
folder as a tar; a URL as it is, fetched by the worker) and the reference patch. The worker
unpacks it once per node (`unpack_task`, cached by content) into a folder of its own and
rewrites the task file to point there. Not shipped, and so needed at the same path on every
worker: the task's `read` folders (model weights, data sets: too large to ship per batch) and
a `setup.python` given as a path.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.env.workspace import git_env
from agent.task import Task, resolve_near
from agent.errors import PerfagentError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO_DIR, REFERENCE = "repo", "reference.diff"


class KitError(PerfagentError):
    """A task that cannot be packed or unpacked (git failed, a corrupt archive): one line."""


@dataclass(frozen=True)
class TaskKit:
    """One task, as a worker rebuilds it: picklable, and named by a digest of its content."""

    name: str  # the task file's name
    doc: dict[str, Any]  # the task file's TOML document, its paths still to be rewritten on the worker
    repo_kind: str  # "bundle" (a git repo: the base commit and its history), "tar" (a plain folder), "url"
    repo: bytes | str = b""
    base: str = "HEAD"  # the base commit's sha for a bundle
    reference: bytes | None = None
    digest: str = field(default="")


def pack_task(task: Task) -> TaskKit:
    """Everything a worker needs of `task` that its file names by path (see the module's docstring)."""
    doc = tomllib.loads(task.file.read_text(encoding="utf-8"))
    if task.read:
        doc["read"] = [str(p) for p in task.read]
    setup = doc.get("setup") or {}
    if "/" in (setup.get("python") or ""):
        found = resolve_near(task.file, setup["python"])
        setup["python"] = str(found) if found is not None else setup["python"]
    base = task.spec.base
    if task.repo_is_url:
        kind, repo = "url", task.repo
    elif (Path(task.repo) / ".git").exists():
        kind, base = "bundle", _sha(task.repo, task.spec.base)
        repo = _bundle(task.repo, base)
    else:
        kind, repo = "tar", _tar(Path(task.repo))
    reference = task.reference_patch.read_bytes() if task.reference_patch else None
    h = hashlib.sha256()
    for part in (task.file.name, json.dumps(doc, sort_keys=True, default=str), kind, base):
        h.update(part.encode() + b"\0")
    h.update(repo if isinstance(repo, bytes) else repo.encode())
    h.update(b"\0" + (reference if reference is not None else b"-"))
    return TaskKit(name=task.file.name, doc=doc, repo_kind=kind, repo=repo, base=base, reference=reference,
                   digest=h.hexdigest()[:32])


def unpack_task(kit: TaskKit, cache: Path) -> Path:
    """The kit as a task file on this machine, under `cache/<digest>/`: built once, then reused by every job
    of the task on this node (a lock keeps two jobs from building it at once)."""
    root = cache / kit.digest
    task_file = root / kit.name
    if task_file.is_file():
        return task_file
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".{kit.digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if task_file.is_file():
            return task_file
        shutil.rmtree(root, ignore_errors=True)
        building = Path(tempfile.mkdtemp(prefix=f".{kit.digest}.", dir=cache))
        try:
            _unpack(kit, building, final=root)
            os.replace(building, root)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
    return task_file


def _unpack(kit: TaskKit, into: Path, *, final: Path) -> None:
    doc = json.loads(json.dumps(kit.doc))  # a deep copy: the kit is shared by the jobs of this worker
    if kit.repo_kind == "bundle":
        (into / "repo.bundle").write_bytes(kit.repo)  # type: ignore[arg-type]
        _git("clone", "--quiet", str(into / "repo.bundle"), str(into / REPO_DIR))
        (into / "repo.bundle").unlink()
        doc["repo"], doc["base"] = str(final / REPO_DIR), kit.base
    elif kit.repo_kind == "tar":
        with tarfile.open(fileobj=io.BytesIO(kit.repo), mode="r:") as tar:  # type: ignore[arg-type]
            if hasattr(tarfile, "tar_filter"):  # no member outside the folder, no device file
                tar.extractall(into / REPO_DIR, filter="tar")
            else:  # pragma: no cover - Python before 3.10.12
                tar.extractall(into / REPO_DIR)
        doc["repo"] = str(final / REPO_DIR)
    if kit.reference is not None:
        (into / REFERENCE).write_bytes(kit.reference)
        doc.setdefault("reference", {})["patch"] = str(final / REFERENCE)
    (into / kit.name).write_text(dump_toml(doc), encoding="utf-8")


def _sha(repo: str, base: str) -> str:
    return _git("-C", repo, "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}").strip()


def _bundle(repo: str, sha: str) -> bytes:
    """A git bundle of `sha` and its history, without touching the user's repo: a scratch repo borrows its
    objects (alternates) and holds the one ref a bundle needs."""
    common = _git("-C", repo, "rev-parse", "--path-format=absolute", "--git-common-dir").strip()
    with tempfile.TemporaryDirectory(prefix="perfagent-bundle-") as tmp:
        scratch = Path(tmp) / "r.git"
        _git("init", "--quiet", "--bare", str(scratch))
        (scratch / "objects" / "info" / "alternates").write_text(str(Path(common) / "objects") + "\n")
        _git("-C", str(scratch), "update-ref", "refs/heads/base", sha)
        _git("-C", str(scratch), "bundle", "create", "--quiet", str(Path(tmp) / "b.bundle"), "refs/heads/base")
        return (Path(tmp) / "b.bundle").read_bytes()


def _tar(folder: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:") as tar:
        for child in sorted(folder.iterdir()):
            tar.add(child, arcname=child.name)
    return buf.getvalue()


def _git(*args: str) -> str:
    proc = subprocess.run(["git", *args], capture_output=True, text=True, env=git_env())
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise KitError(f"git {args[2] if args[0] == '-C' else args[0]}: {lines[-1] if lines else 'failed'}")
    return proc.stdout


# -- TOML out (tomllib only reads) ---------------------------------------------------------------------
def dump_toml(doc: dict[str, Any]) -> str:
    """A TOML document that `tomllib.loads` reads back as `doc` (strings, numbers, booleans, arrays and
    tables: what a task file holds)."""
    lines = [f"{_key(k)} = {_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for k, v in doc.items():
        if isinstance(v, dict):
            lines += _table([k], v)
    return "\n".join(lines) + "\n"


def _table(path: list[str], table: dict[str, Any]) -> list[str]:
    lines = ["", "[" + ".".join(map(_key, path)) + "]"]
    lines += [f"{_key(k)} = {_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for k, v in table.items():
        if isinstance(v, dict):
            lines += _table([*path, k], v)
    return lines


def _key(k: str) -> str:
    return k if k and all(c.isascii() and (c.isalnum() or c in "_-") for c in k) else _string(k)


def _string(s: str) -> str:
    # JSON's escapes are TOML's (\" \\ \n \t \uXXXX); DEL is the one control character JSON leaves raw
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")) if not math.isfinite(v) else repr(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"no TOML for {type(v).__name__}")
