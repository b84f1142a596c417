"""Why a run ended, as exceptions: raised where the reason is found, caught once by the loop.

After mini-swe-agent's exceptions.py: each exit knows the `subtype` report.json gives it and
carries the one-line `result`, so no code path spells those strings out by hand.
"""

from __future__ import annotations

import signal
from typing import ClassVar

from agent.util.text import first_line


class RunExit:
    """What every exit says in report.json: `subtype` and the one-line `result`."""

    subtype: ClassVar[str] = "error_during_execution"
    result: str


class RunEnded(RunExit, Exception):
    """The run is over for a reason the loop found (an Exception: never a signal)."""

    def __init__(self, result: str):
        super().__init__(result)
        self.result = result


class Submitted(RunEnded):
    """`submit` was called and the final checks passed."""

    subtype = "success"


class StoppedWithoutSubmitting(RunEnded):
    """The model stopped calling tools, even after being told to submit: not a success."""

    def __init__(self, last_text: str = ""):
        said = first_line(last_text)
        super().__init__("stopped without submitting" + (f": {said}" if said else " (no tool call, twice)"))


class MaxTurns(RunEnded):
    subtype = "error_max_turns"

    def __init__(self, max_turns: int):
        super().__init__(f"stopped after {max_turns} turns without a passing submit")


class OverBudget(RunEnded):
    subtype = "error_max_budget"

    def __init__(self, cost_usd: float, budget_usd: float, next_usd: float | None = None):
        """`next_usd`: the worst case of the request refused because it did not fit in what was left (the relay)."""
        if next_usd is not None and cost_usd <= budget_usd:
            super().__init__(f"stopped: cost ${cost_usd:.4f}; the next request could cost up to ${next_usd:.4f}, "
                             f"more than is left of the budget of ${budget_usd:g}")
        else:
            super().__init__(f"stopped: cost ${cost_usd:.4f} exceeded the budget of ${budget_usd:g}")


class TimedOut(RunEnded):
    def __init__(self, timeout_s: float, *, waiting_for_model: bool = False):
        why = " (the run's time limit) waiting for the model to reply" if waiting_for_model else ""
        super().__init__(f"timed out after {timeout_s:g}s{why}")


class TaskUncheckable(RunEnded):
    """The task's own tests or bench fail on its unchanged base: no agent starts, since every change would
    fail and be blamed (the line says what failed and how to fix the task)."""


class ModelFailed(RunEnded):
    """The provider failed for good (after its retries); the batch retries runs whose result says so."""

    def __init__(self, error: object):
        super().__init__(f"model error: {error}")


class AgentFailed(RunEnded):
    """An external agent could not run, or ended abnormally (missing, crashed, printed no result)."""

    def __init__(self, agent: str, why: str):
        super().__init__(f"{agent}: {first_line(why)}" if not why.startswith(f"{agent}:") else first_line(why))


class Interrupted(RunExit, KeyboardInterrupt):
    """SIGINT or SIGTERM, raised in the main thread so every `finally` on the way out runs.

    A KeyboardInterrupt, not an Exception: a tool's or a check's `except Exception` must not
    swallow it and carry on.
    """

    def __init__(self, signal_name: str = "SIGINT"):
        super().__init__(signal_name)
        self.signal_name = signal_name
        self.result = f"interrupted by {signal_name}"

    @property
    def exit_code(self) -> int:
        return signal_exit_code(self.signal_name)


def signal_exit_code(signal_name: str) -> int:
    """The shell's convention: 128 + the signal's number (130 for SIGINT, 143 for SIGTERM)."""
    return 128 + int(getattr(signal, signal_name, signal.SIGINT))


def as_interrupted(err: KeyboardInterrupt) -> Interrupted:
    """The exit an interrupt means: a plain Ctrl-C without our handler is SIGINT."""
    return err if isinstance(err, Interrupted) else Interrupted("SIGINT")

