"""The uninitialised-read sanitizer, harness side: what to watch, and what the test processes saw.

The poisoned run's processes (sanitize_hook.py, started by our check hook) track every tensor
allocated uninitialised from a line of the changed files and append each read of still
unwritten elements to a file of their own in a folder the harness owns. Here those records
become one result: the patch's buffers (allocated on a changed line) read before written, each
with its op, call site and the tests it happened in, kept apart from allocations the base
already made uninitialised; the changed lines that wrap memory no watched allocator made in a tensor
(ctypes, an extension's own allocation), as "not watched"; and "not measured" (no process started
the sanitizer, and why) apart from "nothing read". Only rows signed with the run's key count (agent.checks.records), and
every process that started the sanitizer must have closed it: a closing row that is missing, says
the mode left the dispatch stack or the canary read went unseen, or whose digest does not match
the rows before it, makes the whole result "not measured". This evidence is still gathered inside
the processes under test; `note` says so when it is all there is.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from agent.checks.coverage import target_paths, untrusted
from agent.checks.evaluation import SanitizerResult, UninitRead
from agent.checks.patchinfo import FileLines
from agent.checks.records import digest, read_rows
from agent.util.files import empty_folder

NOT_STARTED = ("no process of the poisoned run imported torch with perfagent's hook (the tests use no torch, "
               "or their interpreter skips sitecustomize)")


def prepare(folder: Path, root: Path, files: list[str], kernels: list[str],
            heal: list[FileLines] | None = None) -> Path:
    """An empty `folder` telling the processes which files' allocations to track and which functions
    are opaque kernels (every tensor argument counts as read). `heal`: the changed lines whose buffers
    are zero-filled once a read of them is recorded, as the `torch.zeros` a rewrite replaced would have
    been, so the run goes on as the base's would and one run finds every such read, not the first per
    test (a quick check's search; a graded check never heals: its poisoned tests must see the garbage)."""
    folder.mkdir(parents=True, exist_ok=True)
    empty_folder(folder)
    sites = sorted({f"{p}:{n}" for f in heal or [] for p in target_paths(root, [f.path]) for n in f.lines})
    (folder / "config.json").write_text(json.dumps({"targets": target_paths(root, files), "kernels": kernels,
                                                    "heal": sites}))
    return folder


def collect(folder: Path, root: Path, changed: list[FileLines], key: str) -> SanitizerResult:
    """Every process's records, merged per (buffer, op, argument, call site) over tests."""
    started, errors, forged, unkeyed, tampered = 0, [], 0, 0, 0
    merged: dict[tuple, UninitRead] = {}
    allocated: set[str] = set()
    unwatched: dict[str, str] = {}  # site -> what memory it wraps that nothing watched
    by_return: dict[str, list[int]] = {}  # "site#n" -> [buffers, written in full when the call that made them returned]
    for f in sorted(folder.glob("reads.*")):
        got = read_rows(f, key)
        forged += got.forged
        unkeyed += got.no_key
        problem = _unclosed(f, got.rows, got.signed)
        if problem:
            errors.append(problem)
            tampered += 1
        for row in got.rows:
            if row.startswith("#"):
                started += row == "#started"
                if row.startswith("#error"):
                    errors.append(row[len("#error "):])
                continue
            try:
                raw = json.loads(row)
                if "alloc" in raw:
                    allocated.add(_site(raw["alloc"], root))
                    continue
                if "unwatched" in raw:
                    unwatched.setdefault(_site(raw["unwatched"], root), str(raw.get("how")))
                    continue
                if "by_return" in raw:
                    counts = by_return.setdefault(f'{_site(raw["by_return"], root)}#{int(raw["nth"])}', [0, 0])
                    counts[0] += int(raw["buffers"])
                    counts[1] += int(raw["whole"])
                    continue
                read = _read(raw, root)
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            key = (read.buffer, read.op, read.argument, read.at)
            if key in merged:
                merged[key].tests = list(dict.fromkeys([*merged[key].tests, *read.tests]))
            else:
                merged[key] = read
    if started == 0 or errors:
        why = "; ".join(dict.fromkeys(errors)) or NOT_STARTED
        return SanitizerResult(measured=False, tampered=bool(tampered),
                               note=f"uninitialised reads not measured: {why}")
    lines = {f.path: set(f.lines) for f in changed}
    mine = [f"{site}: {how}" for site, how in sorted(unwatched.items())
            if int(site.rpartition(":")[2]) in lines.get(site.rpartition(":")[0], ())]
    result = SanitizerResult(allocated=sorted(allocated), unwatched=mine, by_return=dict(sorted(by_return.items())),
                             note="; ".join([IN_PROCESS, *untrusted(forged, unkeyed, "reads they made")]))
    for read in merged.values():
        path, _, line = read.buffer.rpartition(":")
        (result.reads if int(line) in lines.get(path, ()) else result.elsewhere).append(read)
    return result


# Said beside every trusted result: what the signing and the closing record cannot rule out.
IN_PROCESS = "in-process evidence: signed rows, canary-checked at exit"


def _unclosed(path: Path, rows: list[str], signed: list[str]) -> str | None:
    """Why the process that wrote `path` cannot be trusted to have watched every read, or None."""
    pid = path.name.split(".")[1]
    closing = [i for i, r in enumerate(rows) if r.startswith("#closed ")]
    if "#started" not in rows:
        return None
    if not closing:
        return ("a process that ran the sanitizer left no closing record (it ended before its exit "
                "handlers ran, or its records were removed)")
    last = closing[-1]
    try:
        summary = json.loads(rows[last][len("#closed "):])
    except ValueError:
        return "a sanitizer's closing record is unreadable"
    own = [s for r, s in zip(rows[:last], signed[:last]) if r.startswith("#") or _pid(r) == pid]
    if summary.get("digest") != digest(own) or summary.get("rows") != len(own):
        return "a sanitizer's records do not match its closing record (rows were removed or rewritten)"
    if not summary.get("on_stack"):
        return "the sanitizer was taken off torch's dispatch stack before the process ended"
    if not summary.get("canary"):
        return "the sanitizer's canary read went unseen (its checks were replaced or bypassed)"
    return None


def _pid(row: str) -> str | None:
    try:
        return str(json.loads(row).get("pid"))
    except (ValueError, AttributeError):
        return None


def _read(raw: dict, root: Path) -> UninitRead:
    path, _, line = raw["site"].rpartition(":")
    rel = _relative(path, root)
    try:
        code = (root / rel).read_text(errors="replace").splitlines()[int(line) - 1].strip()
    except (OSError, IndexError):
        code = ""
    return UninitRead(buffer=f"{rel}:{line}", code=code, op=raw["op"], argument=raw.get("arg"),
                      uninitialised=raw.get("uninitialised", 0), elements=raw.get("of", 0),
                      index=raw.get("index") or [], at=_where(raw.get("at"), root), via=_where(raw.get("via"), root),
                      tests=[raw["test"]] if raw.get("test") else [])


def _site(raw: str, root: Path) -> str:
    """'file:line' with the file made repo-relative."""
    path, _, line = str(raw).rpartition(":")
    return f"{_relative(path, root)}:{int(line)}"


def _relative(path: str, root: Path) -> str:
    for base in (str(root), os.path.realpath(root)):
        if path.startswith(base + os.sep):
            return path[len(base) + 1:]
    return path


def _where(where: str | None, root: Path) -> str | None:
    """'file:line (function)' with the file made repo-relative when it is in the repo."""
    if where is None:
        return None
    return _relative(where, root)
