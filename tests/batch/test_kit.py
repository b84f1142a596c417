"""A task packed for a worker that shares no filesystem with the batch, and unpacked there
(agent/batch/kit.py); a job's inputs placed in its own folder (agent/batch/ray_job.py). No Ray here."""

from __future__ import annotations

import tempfile
import tomllib
from pathlib import Path

import git
import pytest

from agent.batch.executors import JobSpec, LaunchConfig
from agent.batch.kit import dump_toml, pack_task, unpack_task
from agent.batch.ray_job import JobInputs, _files, _place
from agent.options import RunOptions
from agent.task import load_task, task_files
from helpers import make_repo

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("doc", [
    {"id": "x", "prompt": 'say "hi"\n\ttwice \\ \x7f ünï 😀', "focus": ["a", "b c"], "n": 3, "f": 0.03, "big": 1e-05,
     "yes": True, "empty": [], "correctness": {"command": "pytest -q", "poison": False},
     "setup": {"venv": ["pip install x"], "nested": {"deep": 1, "odd key": "v"}}, "rows": [{"a": 1}, {"b": "c"}]},
])
def test_dump_toml_reads_back_as_it_was(doc):
    assert tomllib.loads(dump_toml(doc)) == doc


def test_every_bundled_task_file_reads_back_as_it_was():
    files = task_files(ROOT / "tasks")
    assert files
    for f in files:
        doc = tomllib.loads(f.read_text())
        assert tomllib.loads(dump_toml(doc)) == doc, f


def _task(tmp_path: Path, repo_line: str, extra: str = "") -> Path:
    tasks = tmp_path / "tasks"
    tasks.mkdir(exist_ok=True)
    (tasks / "ref.diff").write_text("diff --git a/m.py b/m.py\n")
    f = tasks / "t.toml"
    f.write_text(f'id = "t"\n{repo_line}\nprompt = "p"\n{extra}[correctness]\ncommand = "true"\n'
                 '[reference]\npatch = "ref.diff"\n')
    return f


def test_a_git_task_travels_as_a_bundle_of_its_base_and_keeps_its_sha(tmp_path):
    """base = the first of two commits: the worker's copy has that commit, with the same sha, as its base; the
    user's repo is left as it was (no ref added); a second unpack reuses the first."""
    repo = make_repo(tmp_path / "src", {"m.py": "A = 1\n"})
    base = repo.head.commit.hexsha
    (tmp_path / "src" / "m.py").write_text("A = 2\n")
    repo.index.add(["m.py"])
    repo.index.commit("two")
    refs = sorted(r.path for r in repo.refs)
    (tmp_path / "data").mkdir()
    f = _task(tmp_path, 'repo = "../src"', f'base = "{base[:10]}"\nread = ["data"]\n')
    kit = pack_task(load_task(f))
    assert kit.repo_kind == "bundle" and kit.base == base and sorted(r.path for r in repo.refs) == refs

    worker = tmp_path / "elsewhere"
    copy = load_task(unpack_task(kit, worker))
    assert copy.file.is_relative_to(worker) and Path(copy.repo).is_relative_to(worker)
    assert copy.spec.base == base and git.Repo(copy.repo).commit(base).hexsha == base
    assert copy.reference_patch.is_relative_to(worker) and copy.reference_patch.read_text().startswith("diff")
    assert copy.read == (tmp_path / "data",)  # not shipped: the same path on every worker
    assert unpack_task(kit, worker) == copy.file and len(list(worker.iterdir())) == 2  # the folder and its lock
    assert pack_task(load_task(f)).digest == kit.digest


def test_a_plain_folder_travels_as_a_tar_and_a_url_as_it_is(tmp_path):
    (tmp_path / "plain" / "pkg").mkdir(parents=True)
    (tmp_path / "plain" / "pkg" / "m.py").write_text("A = 1\n")
    kit = pack_task(load_task(_task(tmp_path, 'repo = "../plain"')))
    assert kit.repo_kind == "tar"
    copy = load_task(unpack_task(kit, tmp_path / "w"))
    assert Path(copy.repo).is_relative_to(tmp_path / "w")
    assert (Path(copy.repo) / "pkg" / "m.py").read_text() == "A = 1\n"
    url = pack_task(load_task(_task(tmp_path, 'repo = "https://example.invalid/r.git"')))
    assert (url.repo_kind, url.repo) == ("url", "https://example.invalid/r.git")
    assert load_task(unpack_task(url, tmp_path / "w")).repo == "https://example.invalid/r.git"


def test_a_jobs_inputs_land_in_its_own_folder(tmp_path, monkeypatch):
    """The replay file, the run's predictions and a price table, shipped as bytes: the job's model, out dir and
    options point at the copies; nothing of the batch's paths is read."""
    (tmp_path / "node-tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "node-tmp"))  # the node's temp folder: its kit cache
    repo_root = tmp_path / "batch"
    repo_root.mkdir()
    make_repo(repo_root / "src", {"m.py": "A = 1\n"})
    kit = pack_task(load_task(_task(repo_root, 'repo = "../src"')))
    job = JobSpec(key="t/prediction-x/s0", task="t", task_file="/nowhere/t.toml", model="replay:t.jsonl",
                  model_arg="replay:/nowhere/traj.jsonl", sample=0)
    cfg = LaunchConfig(run_id="r", out_dir="/nowhere/out", cwd="/nowhere",
                       options=RunOptions(prices=Path("/nowhere/prices.json")))
    inputs = JobInputs(replay=b'{"type": "response"}\n', predictions=b"{}\n", prices=b"{}")
    here = tmp_path / "job"
    here.mkdir()
    placed_job, placed_cfg = _place(job, cfg, kit, inputs, here)
    assert placed_job.model_arg == f"replay:{here / 'inputs' / 'traj.jsonl'}"
    assert (here / "inputs" / "traj.jsonl").read_bytes() == inputs.replay
    assert (Path(placed_cfg.out_dir) / "results" / "r" / "predictions.in.jsonl").read_bytes() == b"{}\n"
    assert placed_cfg.options.prices == here / "inputs" / "prices.json" and placed_cfg.cwd == str(here)
    assert Path(placed_job.task_file).is_relative_to(tmp_path / "node-tmp" / "perfagent-ray-kits")
    # what goes back: the job's own folders only, never the predictions copy or the live-run lock
    job_dir = Path(placed_cfg.out_dir) / "results" / "r" / job.key
    job_dir.mkdir(parents=True)
    (job_dir / "report.json").write_text("{}")
    (job_dir / ".running").write_text("")
    assert set(_files(Path(placed_cfg.out_dir), "r", job.key)) == {f"results/r/{job.key}/report.json"}
