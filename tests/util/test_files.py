"""Outputs are written whole (atomic_write) and readable by others: the mode open() would give, not 0600."""

from __future__ import annotations

import os
import stat

from agent.results.report import new_report
from agent.util.files import atomic_write, empty_folder, read_json, write_json


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_atomic_writes_get_normal_modes(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "a" / "summary.md", "x\n")
        write_json(tmp_path / "summary.json", {"a": 1})
        new_report().write(tmp_path / "report.json")
    finally:
        os.umask(old)
    for name in ("a/summary.md", "summary.json", "report.json"):
        assert _mode(tmp_path / name) == 0o644, name
    assert not [p for p in tmp_path.rglob(".*.tmp")]  # no temporary file left behind


def test_atomic_write_respects_the_umask(tmp_path):
    old = os.umask(0o077)
    try:
        atomic_write(tmp_path / "private.txt", "x\n")
        os.umask(0o002)
        atomic_write(tmp_path / "group.txt", "x\n")
        atomic_write(tmp_path / "private.txt", "y\n")  # rewritten under the new umask
    finally:
        os.umask(old)
    assert _mode(tmp_path / "group.txt") == 0o664
    assert _mode(tmp_path / "private.txt") == 0o664 and (tmp_path / "private.txt").read_text() == "y\n"


def test_a_folder_a_sandboxed_process_wrote_to_is_emptied_whatever_modes_it_left_and_never_through_a_link(tmp_path):
    """The bench's record folders are made anew after the plain tests, which could write there: a folder
    left at mode 000, files inside it, and a link out of the folder must not survive (nor be followed)."""
    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "f").write_text("x")
    outside.chmod(0o700)
    folder = tmp_path / "records"
    (folder / "deep" / "deeper").mkdir(parents=True)
    (folder / "deep" / "deeper" / "rows").write_text("forged")
    (folder / "config.json").write_text("{}")
    (folder / "out").symlink_to(outside / "keep")
    (folder / "deep" / "deeper").chmod(0)
    (folder / "deep").chmod(0)
    folder.chmod(0)
    empty_folder(folder)
    assert folder.is_dir() and list(folder.iterdir()) == [] and _mode(folder) == 0o755  # usable by the next run
    assert (outside / "keep" / "f").read_text() == "x" and outside.stat().st_mode & 0o777 == 0o700


def test_a_file_from_elsewhere_that_is_not_json_reads_as_none(tmp_path):
    """Results folders come from elsewhere: nesting too deep to parse is not a traceback in every reader."""
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "bad.json").write_text("{")
    assert read_json(tmp_path / "deep.json") is None and read_json(tmp_path / "bad.json") is None
    assert read_json(tmp_path / "none.json") is None
