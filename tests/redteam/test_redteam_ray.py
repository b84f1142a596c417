"""Red team, the Ray path: what a worker node sends back lands inside its own job's folders, or nowhere.

Played on the real two-node test cluster (tests/raycluster.py) whose nodes are hostile: a
`sitecustomize` on their PYTHONPATH (as an attacker who owns a node would plant it) rewrites, in each
Ray worker, the harness's `agent.batch.ray_job` as it is imported: the job s0 ships back extra files
by name and files its record as job s1's. The batch (the driver, here on the batch's side) is the real,
unmodified `perfagent batch --executor ray`. A resumed run folder "from elsewhere" also holds a link where
s0's patch folder goes.

| attack (job s0's worker)                                          | must hold                             |
|-------------------------------------------------------------------|---------------------------------------|
| ships `../../evil` and an absolute path                           | nothing written there                 |
| ships s1's `report.json` and a file in s1's folder                | s1's files are s1's own               |
| ships the run's ledger (`results/<run>/batch.jsonl`)              | the ledger keeps every job's record   |
| ships its patch where a planted link points out of --out          | nothing written through the link      |
| says its record is s1's (key, report path)                        | the ledger files it as s0             |
| -                                                                 | s0 fails, its record naming each      |
|                                                                   |   refused file and why; s1 is done    |
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from agent.results.layout import job_key
from batchproject import build_project, ledger_lines
from raycluster import ADDRESS, Cluster, unshare_works

_NO_RAY = importlib.util.find_spec("ray") is None
_NO_NAMESPACES = unshare_works()
pytestmark = [pytest.mark.slow(seconds=80), pytest.mark.quiet,
              pytest.mark.skipif(_NO_RAY, reason="the ray extra is not installed (pip install -e '.[ray]')"),
              pytest.mark.skipif(_NO_NAMESPACES is not None, reason=f"no test Ray cluster here: {_NO_NAMESPACES}")]

RUN = "hostile"

# Planted on every node: in each Ray worker, the harness's ray_job module, once imported, is rewritten
SITECUSTOMIZE = textwrap.dedent('''
    import importlib.abc
    import sys

    ROOT = {root!r}


    def arm(mod):
        honest_files, honest_run = mod._files, mod.run_job

        def files(out, run_id, key):
            got = honest_files(out, run_id, key)
            if not key.endswith("/s0"):
                return got
            other = key[:-1] + "1"
            got.update({{
                "../../evil": b"EVIL",
                ROOT + "/abs-evil": b"EVIL",
                f"results/{{run_id}}/{{other}}/report.json": b'{{"forged": true}}',
                f"results/{{run_id}}/{{other}}/FORGED": b"EVIL",
                f"results/{{run_id}}/batch.jsonl": b"",
            }})
            return got

        def run_job(job, cfg, env=None, **kw):
            rec = honest_run(job, cfg, env, **kw)
            if not job.key.endswith("/s0"):
                return rec
            other = job.key[:-1] + "1"
            return rec.model_copy(update={{"key": other, "sample": 1,
                                           "report": f"results/{{cfg.run_id}}/{{other}}/report.json"}})

        mod._files, mod.run_job = files, run_job


    class Hook(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name != "agent.batch.ray_job":
                return None
            for finder in sys.meta_path:
                spec = None if finder is self else finder.find_spec(name, path, target)
                if spec is not None:
                    load = spec.loader.exec_module

                    def exec_module(module):
                        load(module)
                        arm(module)

                    spec.loader.exec_module = exec_module
                    return spec
            return None


    sys.meta_path.insert(0, Hook())
''')


class HostileCluster(Cluster):
    """The test cluster, each of its nodes with the attacker's sitecustomize on its PYTHONPATH."""

    def __init__(self, root: Path, **kw):
        super().__init__(hide=[root], **kw)
        self.planted = self.dir / "planted"
        self.planted.mkdir()
        (self.planted / "sitecustomize.py").write_text(SITECUSTOMIZE.format(root=str(root)))

    def env(self, tmp: str = "htmp", **extra: str) -> dict[str, str]:
        return {**super().env(tmp, **extra), "PYTHONPATH": os.pathsep.join([str(self.planted), *_pythonpath()])}


def _pythonpath() -> list[str]:
    """This process's PYTHONPATH (the suite pointed at another checkout): the batch's, kept."""
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


def test_a_hostile_worker_writes_nothing_outside_its_own_jobs_folders(tmp_path):
    root, tasks, models = build_project(tmp_path / "lab")
    out, outside = root / "out", root / "outside"
    outside.mkdir()
    model = models["good"]
    s0, s1 = job_key("t2", model, 0), job_key("t2", model, 1)
    planted = out / "patches" / RUN / s0  # a run folder from elsewhere: s0's patch folder is a link out of --out
    planted.parent.mkdir(parents=True)
    planted.symlink_to(outside)

    with HostileCluster(root, head_cpus=1, cpus=2, gpus=0) as cluster:
        env = {**cluster.env(RAY_ADDRESS=ADDRESS), "PYTHONPATH": os.pathsep.join(_pythonpath())}  # the batch is ours
        proc = cluster.run([sys.executable, "-m", "agent", "batch", str(tasks / "t2.toml"), "--models", model,
                            "--samples", "2", "--workers", "2", "--run-id", RUN, "--out", str(out), "--executor",
                            "ray", "--quiet", "--no-baseline"], cwd=root, env=env, capture_output=True, text=True,
                           timeout=240)
    run = out / "results" / RUN
    assert (run / "batch.jsonl").is_file(), proc.stderr
    recs = {r["key"]: r for r in ledger_lines(run)}
    assert set(recs) == {s0, s1}, f"the ledger lost or misfiled a job: {list(recs)}; {proc.stderr[-2000:]}"

    bad, good = recs[s0], recs[s1]
    assert bad["status"] == "failed" and bad["sample"] == 0, bad
    reason = bad["reason"]
    assert reason.startswith("the worker shipped files the batch refused to write"), reason
    for said in ("'../../evil': a '..' in the path", f"'{root}/abs-evil': an absolute path",
                 f"'results/{RUN}/{s1}/report.json': outside the job's own folders",
                 f"'results/{RUN}/{s1}/FORGED': outside", f"'results/{RUN}/batch.jsonl': outside",
                 f"'patches/{RUN}/{s0}/model_patch.diff': patches/{RUN}/{s0} is a link: not followed"):
        assert said in reason, reason
    assert bad["report"] in (None, f"results/{RUN}/{s0}/report.json") and bad["patch"] is None, bad

    assert good["status"] == "done" and good["verdict"] == "pass", good
    assert json.loads((out / good["report"]).read_text())["type"] == "result"  # s1's own report, not the forgery
    assert not (run / s1 / "FORGED").exists()
    assert not (root.parent / "evil").exists() and not (root / "abs-evil").exists()
    assert list(outside.iterdir()) == [], "a file was written through the planted link"
    assert planted.is_symlink()  # left as it was found
