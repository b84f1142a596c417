"""How a batch session grows its plan (results/<run-id>/batch.json, schema in agent.results.plan).

A session that resumes with more samples or models extends it; nothing planned is ever dropped.
"""

from __future__ import annotations

import time
from typing import Sequence

from agent.options import RunOptions
from agent.results.plan import Plan, PlannedJob


def extended(plan: Plan, *, run_id: str, source: str | None, models: Sequence[str], samples: int,
             options: RunOptions, jobs: Sequence[PlannedJob]) -> Plan:
    """`plan` with one batch session's request added: models, samples and jobs only grow."""
    entries = {j.key: j for j in plan.jobs} | {j.key: j for j in jobs}
    return Plan(run_id=run_id, source=source or plan.source, models=list(dict.fromkeys([*plan.models, *models])),
                samples=max(samples, plan.samples), options=options, created=plan.created or time.time(),
                jobs=sorted(entries.values(), key=lambda j: j.key))

