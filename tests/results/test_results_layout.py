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


def test_a_run_id_a_live_run_is_writing_is_refused_and_free_again_once_it_ends(tmp_path, capsys):
    import subprocess
    import sys

    from agent.cli import main
    from agent.results.layout import job_running

    folder = tmp_path / "results" / "r1" / "cuda-graph-buffers"
    hold = ("import sys, time\nfrom pathlib import Path\nfrom agent.results.layout import claim_job\n"
            f"with claim_job(Path({str(folder)!r})):\n    print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held" and job_running(folder)
        code = main(["run", "tasks/cuda-graph-buffers.toml", "--model", "rules", "--max-turns", "1", "--run-id", "r1",
                     "--out", str(tmp_path)])
        err = capsys.readouterr().err.strip()
        assert code == 2 and err.count("\n") == 0, err
        assert f"is being written by a live run (pid {holder.pid})" in err and "--run-id" in err
        assert not (folder / "trajectory.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()
    assert not job_running(folder)
    code = main(["run", "tasks/cuda-graph-buffers.toml", "--model", "rules", "--max-turns", "1", "--run-id", "r1",
                 "--out", str(tmp_path)])
    assert code == 1 and (folder / "trajectory.jsonl").exists()  # ran: error_max_turns, as asked
