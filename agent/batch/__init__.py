"""agent.batch's face: the request that makes a batch, as `batch` and `check --predictions` ask for one.

`perfagent batch`: tasks x models x samples as job processes, a ledger to resume from, and the summary."""

from agent.batch.request import BASELINE, SetRequest, contestants, run_set, started

__all__ = ["BASELINE", "SetRequest", "contestants", "run_set", "started"]
