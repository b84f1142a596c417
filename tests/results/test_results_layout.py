"""agent.results.layout: a job's key is made and parsed in one place."""

from __future__ import annotations

from agent.results.layout import JobKey, job_key, locate, split_key


def test_a_job_key_round_trips_and_a_single_runs_key_is_its_task():
    key = job_key("t1", "anthropic:claude-sonnet-4-5", 3)
    assert key == "t1/anthropic-claude-sonnet-4-5/s3"
    assert split_key(key) == JobKey("t1", "anthropic-claude-sonnet-4-5", 3)
    assert split_key("t1") == JobKey("t1", None, 0) and split_key("t1/m/x3") == JobKey("t1", None, 0)


def test_locate_finds_the_run_folder_of_a_job_folder(tmp_path):
    run_dir = tmp_path / "results" / "r"
    job = run_dir / "t1" / "m" / "s0"
    job.mkdir(parents=True)
    (job / "report.json").write_text("{}")
    assert locate(job) == (run_dir.resolve(), "t1/m/s0")
    assert locate(run_dir) == (run_dir.resolve(), None)
