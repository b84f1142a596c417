"""How a run is run, whatever started it: `perfagent run`, each job of `perfagent batch`, `perfagent check`.

One model, one set of flags, one reader of parsed flags: a batch hands its jobs the same
`RunOptions` the run command builds, as JSON, so no flag is spelled out twice and a renamed
flag cannot silently drop out of a batch. The batch plan records them for `--resume`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from agent.models.pricing import PriceTable
    from agent.task import Task

BATCH_HELP = "passed to every job's run"


@dataclass(frozen=True)
class Limits:
    """A run's budget: the task's, with the overrides of the command line."""

    max_turns: int
    max_cost_usd: float
    timeout_s: float
    # The turn limit was asked for (not the task's default): it then binds a scripted policy too, which
    # otherwise takes the turns its plan needs (rules: one per edit, and a bisection's).
    turns_asked: bool = False

    @classmethod
    def of(cls, task: Task, **overrides: Any) -> Limits:
        b = task.spec.budget
        base = {"max_turns": b.max_turns, "max_cost_usd": b.max_cost_usd, "timeout_s": b.timeout_s}
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base, turns_asked=overrides.get("max_turns") is not None)


class RunOptions(BaseModel):
    """Everything about a run but its task and model; paths are absolute, so any job process finds them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str | None = None
    stream: bool = False
    max_turns: int | None = None  # None: the task's budget
    max_cost_usd: float | None = None  # 0: no budget (agent.models.budget)
    timeout_s: float | None = None
    prices: Path | None = None  # a JSON price table overriding the built-in one
    allow_unsandboxed: bool = False
    keep_workspace: bool = False
    lock_dir: Path | None = None  # perf device locks (default ~/.cache/perfagent/locks)
    seed: int | None = None  # run order and bootstrap of `check`
    rounds: int = 2  # an external agent's sessions: the first, then feedback rounds while its change fails

    def limits(self, task: Task) -> Limits:
        """The task's budget with the overrides given here: the one place they are merged."""
        return Limits.of(task, max_turns=self.max_turns, max_cost_usd=self.max_cost_usd, timeout_s=self.timeout_s)

    def price_table(self) -> PriceTable:
        from agent.models.pricing import load_prices

        return load_prices(self.prices)


def at_least(low: int | float) -> Callable[[str], int | float]:
    """An argparse type: a number (an int where `low` is one) no smaller than `low`, else a usage error."""
    kind = type(low)

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if value < low or value != value:
            raise argparse.ArgumentTypeError(f"{text} is below {low:g}")
        return value
    return parse


def above_zero(text: str) -> float:
    """An argparse type: a number of seconds, more than 0."""
    value = at_least(0.0)(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


def base_url(text: str) -> str:
    """An argparse type: an http(s) URL with a host. `localhost:8000` would reach no server, only after
    a whole run had been set up; it is refused at once."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text.strip())
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a URL: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        hint = f": write http://{text.strip()} or https://{text.strip()}" if "://" not in text else ""
        raise argparse.ArgumentTypeError(f"{text!r} is not an http(s) URL with a host{hint}")
    return text.strip()


# (flag, RunOptions field, add_argument keywords, help in `perfagent run`): the flags run and batch share.
SHARED_FLAGS: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    ("--base-url", "base_url", {"type": base_url},
     "API base URL, http(s)://HOST[:PORT][/PATH] (else ANTHROPIC_BASE_URL / OPENAI_BASE_URL)"),
    ("--stream", "stream", {"action": "store_true"}, "use the streaming API"),
    ("--max-turns", "max_turns", {"type": at_least(1)},
     "stop after N model turns (default: the task's budget.max_turns)"),
    ("--max-cost", "max_cost_usd", {"type": at_least(0.0)},
     "stop once the run has cost more than this many USD; 0: no budget (default: the task's budget.max_cost_usd)"),
    ("--timeout", "timeout_s", {"type": above_zero},
     "stop the run after this many seconds, model calls included (default: the task's budget.timeout_s)"),
    ("--prices", "prices", {}, "JSON file of per-million-token prices overriding the built-in table"),
    ("--rounds", "rounds", {"type": at_least(1), "default": 2},
     "external agents: sessions at most; after a failing grade the agent is resumed with the checks' findings"),
    ("--allow-unsandboxed", "allow_unsandboxed", {"action": "store_true"},
     "let an API model or external agent run where the sandbox is incomplete (the report lists what is not isolated)"),
)
# Flags of one command only, read by `options_from_args` when its parser has them.
OWN_FLAGS = {"keep_workspace": "keep_workspace", "lock_dir": "lock_dir", "seed": "seed"}


def add_run_flags(parser: argparse.ArgumentParser, *, batch: bool = False) -> None:
    """The run options every run takes, on the `run` parser or (each passed to every job) the `batch` one."""
    for flag, _, kw, help_text in SHARED_FLAGS:
        parser.add_argument(flag, **kw, help=f"{help_text} ({BATCH_HELP})" if batch else help_text or None)


def options_from_args(args: argparse.Namespace) -> RunOptions:
    """The RunOptions a parsed command line gives; flags its parser does not have keep their defaults."""
    dests = {**{flag[2:].replace("-", "_"): field for flag, field, _, _ in SHARED_FLAGS}, **OWN_FLAGS}
    given: dict[str, Any] = {field: getattr(args, dest) for dest, field in dests.items() if hasattr(args, dest)}
    for path in ("prices", "lock_dir"):
        if given.get(path):
            given[path] = Path(given[path]).resolve()
    return RunOptions(**given)


def empty_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The arguments given an empty value (`--models ""`: an unset shell variable). An empty value never
    means "the default": read as left out, `--models ""` would start the default batch."""
    found: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None) or "")
            found += empty_flags(chosen, args) if chosen is not None else []
            continue
        value = getattr(args, action.dest, None)
        if any(isinstance(v, str) and not v.strip() for v in (value if isinstance(value, list) else [value])):
            found.append(action.option_strings[0] if action.option_strings else str(action.metavar or action.dest))
    return found
