"""What a Ray worker ships back lands inside its own job's folders, or nowhere: the names, checked.

Real folders and real links in a temp dir; the real-cluster attack is tests/redteam/test_redteam_ray.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.batch.landing import Refused, job_folders, open_folder, refusal, sort_out

RUN, KEY = "r1", "t1/rules/s0"
FOLDERS = job_folders(RUN, KEY)


def test_the_job_folders_are_the_plans():
    assert FOLDERS == ("results/r1/t1/rules/s0", "patches/r1/t1/rules/s0")


@pytest.mark.parametrize("name, why", [
    ("results/r1/t1/rules/s0/report.json", None),
    ("patches/r1/t1/rules/s0/model_patch.diff", None),
    ("results/r1/t1/rules/s0/agent/final.diff", None),  # deeper inside is inside
    ("../../evil", "'..'"),
    ("results/r1/t1/rules/s0/../../s1/report.json", "'..'"),
    ("/tmp/evil", "absolute"),
    ("//tmp/evil", "absolute"),
    ("results/r1/t1/rules/s1/report.json", "outside the job's own folders"),  # another job's record
    ("results/r1/t1/rules/s0x/report.json", "outside the job's own folders"),  # a name that only starts alike
    ("results/r1/batch.jsonl", "outside the job's own folders"),  # the run's ledger
    ("results/r1/t1/rules/s0", "outside the job's own folders"),  # the folder itself
    ("tasks/t1.toml", "outside the job's own folders"),
    ("results/r1/t1/rules/s0/./report.json", "not a normalised path"),
    ("results/r1/t1/rules/s0//report.json", "not a normalised path"),
    ("results/r1/t1/rules/s0/sub/", "not a normalised path"),
    ("results/r1/t1/rules/s0/.running", "lock"),
    ("results/r1/t1/rules/s0/a\x1b[2J", "control character"),
    ("results/r1/t1/rules/s0/a\x00b", "control character"),
    ("", "not a file name"),
    (b"results/r1/t1/rules/s0/x", "not a file name"),
])
def test_a_name_is_written_only_inside_the_jobs_own_folders(name, why):
    got = refusal(name, FOLDERS)
    assert (got is None) if why is None else (got is not None and why in got), got


def test_sort_out_keeps_the_jobs_files_and_names_every_refused_one(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    (out / "patches" / RUN / "t1" / "rules").mkdir(parents=True)
    (out / "patches" / RUN / "t1" / "rules" / "s0").symlink_to(outside)  # a link left in a resumed folder
    (out / "results" / RUN / "t1" / "rules" / "s0").mkdir(parents=True)
    (out / "results" / RUN / "t1" / "rules" / "s0" / "trajectory.jsonl").symlink_to(outside / "t")
    files = {"results/r1/t1/rules/s0/report.json": b"{}", "../../evil": b"x", str(tmp_path / "abs"): b"x",
             "patches/r1/t1/rules/s0/model_patch.diff": b"diff", "results/r1/t1/rules/s0/trajectory.jsonl": b"t",
             "results/r1/t1/rules/s1/report.json": b"{}", "results/r1/t1/rules/s0/checks.json": "not bytes"}
    kept, refused = sort_out(out, RUN, KEY, files)
    assert kept == {"results/r1/t1/rules/s0/report.json": b"{}"}
    assert len(refused) == len(files) - 1
    said = "\n".join(refused)
    for part in ("'../../evil': a '..'", "an absolute path", "patches/r1/t1/rules/s0 is a link",
                 "trajectory.jsonl is a link", "'results/r1/t1/rules/s1/report.json': outside", "not bytes"):
        assert part in said, said
    assert not any(outside.iterdir()) and not (tmp_path / "abs").exists()


def test_sort_out_refuses_what_is_no_mapping(tmp_path):
    assert sort_out(tmp_path, RUN, KEY, [("a", b"")]) == ({}, ["the files came as list, not a mapping of names to "
                                                               "bytes"])


def test_open_folder_makes_the_folder_and_follows_no_link(tmp_path):
    fd = open_folder(tmp_path, "results/r1/t1/rules/s0")
    try:
        assert os.path.samefile(f"/proc/self/fd/{fd}", tmp_path / "results/r1/t1/rules/s0")
    finally:
        os.close(fd)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "results" / "r2").symlink_to(elsewhere)
    with pytest.raises(Refused, match="r2 is a link or a file"):
        open_folder(tmp_path, "results/r2/t1/rules/s0")
    assert not any(Path(elsewhere).iterdir())
