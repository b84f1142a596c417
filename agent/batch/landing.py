"""Where a Ray job's files land on the batch's side: inside that job's own folders, or nowhere.

A Ray worker ships a job's files back by name (agent/batch/ray_job.py), and the batch writes them under
--out. The names come from another machine, so they are checked, never trusted: the batch decides the
job's folders from its own plan (the job's key: `results/<run>/<key>/` and `patches/<run>/<key>/`), and
a name is written only when it is a plain relative path, normalised, with no `..`, strictly inside one
of those two folders, and not the folder's lock; and only when nothing on its way below --out is a link
(or a file where a folder must be), so a link someone left in the tree (a resumed run folder from
elsewhere) cannot carry a byte out. The batch's own writes to the job's folder (its live log) open
every folder on the way with O_NOFOLLOW. What is refused is named, so the job's record can say why.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
import unicodedata
from collections.abc import Mapping
from pathlib import Path

from agent.results.layout import RUNNING, job_paths

__all__ = ["Refused", "job_folders", "open_folder", "refusal", "sort_out"]


class Refused(Exception):
    """A name the batch will not write: one line, saying which and why."""


def job_folders(run_id: str, key: str) -> tuple[str, str]:
    """The job's two folders, relative to --out, as the batch's plan decides them (never the worker)."""
    return tuple(p.as_posix() for p in job_paths(Path(), run_id, key))  # type: ignore[return-value]


def refusal(name: object, folders: tuple[str, ...]) -> str | None:
    """Why `name` may not be written for the job whose folders are `folders`, or None when it may."""
    if not isinstance(name, str) or not name:
        return "not a file name"
    if any(unicodedata.category(c)[0] == "C" for c in name):
        return "a control character in the name"
    if name.startswith("/"):
        return "an absolute path"
    parts = name.split("/")
    if ".." in parts:
        return "a '..' in the path"
    if posixpath.normpath(name) != name or "." in parts:
        return "not a normalised path"
    if not any(name.startswith(folder + "/") for folder in folders):
        return "outside the job's own folders (" + ", ".join(folders) + ")"
    if parts[-1] == RUNNING:
        return "the job folder's lock"
    return None


def open_folder(out_dir: Path, rel: str) -> int:
    """A descriptor of the folder `rel` below `out_dir`, made where missing, reached with no link followed:
    Refused when a part of it is a link (or a file)."""
    fd = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in [p for p in rel.split("/") if p]:
            try:
                os.mkdir(part, 0o777, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Refused(f"{rel}: {part} is a link or a file, not a folder: not followed") from None
                raise
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _in_the_way(out_dir: Path, rel: str) -> str | None:
    """What below `out_dir` would carry a write of `rel` elsewhere: a link (or a file where a folder must
    be) on the way, or a link or non-file at the destination; None when the path is clear."""
    parts = rel.split("/")
    at = out_dir
    for i, part in enumerate(parts):
        at = at / part
        try:
            st = os.lstat(at)
        except FileNotFoundError:
            return None  # made fresh from here on
        last = i == len(parts) - 1
        if stat.S_ISLNK(st.st_mode):
            return f"{'/'.join(parts[:i + 1])} is a link: not followed"
        if not last and not stat.S_ISDIR(st.st_mode):
            return f"{'/'.join(parts[:i + 1])} is not a folder"
        if last and not stat.S_ISREG(st.st_mode):
            return "something other than a file is there: not written over"
    return None


def sort_out(out_dir: Path | str, run_id: str, key: str,
             files: object) -> tuple[dict[str, bytes], list[str]]:
    """The files a worker shipped for job `key` that may be written (by name), and every one refused with
    why, a line each (the name repr'd: it may hold anything)."""
    if not isinstance(files, Mapping):
        return {}, [f"the files came as {type(files).__name__}, not a mapping of names to bytes"]
    folders = job_folders(run_id, key)
    kept: dict[str, bytes] = {}
    refused: list[str] = []
    for name, data in files.items():
        why = refusal(name, folders)
        if why is None and not isinstance(data, bytes):
            why = f"its content is {type(data).__name__}, not bytes"
        if why is None:
            why = _in_the_way(Path(out_dir), name)
        if why is None:
            kept[name] = data
        else:
            refused.append(f"{repr(name)[:160]}: {why}")
    return kept, refused
