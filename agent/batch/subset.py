"""Which tasks of a set a batch runs: the flags evaluators know from mini-swe-agent and SWE-agent.

`--filter REGEX` (on task ids), `--tasks ID,ID`, `--shuffle --seed N`, `--slice START:STOP`, applied in
that order. The choice is recorded in the plan (`Subset.chosen`) so a resumed batch runs the same tasks.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from agent.results.plan import Subset
from agent.task import Task
from agent.errors import BadInput


class SubsetError(BadInput):
    """A subset that cannot be taken (a bad expression, an unknown id, nothing left): one line for the user."""


def choose(tasks: Sequence[Task], subset: Subset) -> tuple[list[Task], Subset]:
    """The tasks `subset` picks, in order, and the subset with `chosen` filled in."""
    picked = list(tasks)
    if subset.chosen:  # a resumed batch: the same tasks as when it started
        ids = {t.id: t for t in tasks}
        missing = [i for i in subset.chosen if i not in ids]
        if missing:
            raise SubsetError(f"the run's tasks {', '.join(missing)} are no longer in the set")
        return [ids[i] for i in subset.chosen], subset
    if subset.filter is not None:
        try:
            pattern = re.compile(subset.filter)
        except re.error as e:
            raise SubsetError(f"--filter {subset.filter!r}: not a regular expression ({e})") from None
        picked = [t for t in picked if pattern.search(t.id)]
    if subset.tasks is not None:
        known = {t.id for t in tasks}
        unknown = [i for i in subset.tasks if i not in known]
        if unknown:
            raise SubsetError(f"--tasks: no task {', '.join(map(repr, unknown))} in the set "
                              f"(its ids: {', '.join(sorted(known))})")
        wanted = set(subset.tasks)
        picked = [t for t in picked if t.id in wanted]
    if subset.shuffle:
        random.Random(subset.seed).shuffle(picked)
    if subset.slice is not None:
        picked = picked[parse_slice(subset.slice)]
    if not picked:
        raise SubsetError("the subset chose no task: " + describe(subset))
    return picked, subset.model_copy(update={"chosen": [t.id for t in picked]})


def parse_slice(text: str) -> slice:
    """"START:STOP" (either may be empty, negative counts from the end), as Python slices a list."""
    start, sep, stop = text.partition(":")
    try:
        if not sep or ":" in stop:
            raise ValueError
        return slice(int(start) if start.strip() else None, int(stop) if stop.strip() else None)
    except ValueError:
        raise SubsetError(f"--slice {text!r}: use START:STOP, e.g. 0:10 or :5") from None


def describe(subset: Subset) -> str:
    """The flags that made `subset`, as a user would type them."""
    parts = [f"--filter {subset.filter!r}"] if subset.filter is not None else []
    parts += [f"--tasks {','.join(subset.tasks)}"] if subset.tasks is not None else []
    parts += [f"--shuffle --seed {subset.seed}"] if subset.shuffle else []
    parts += [f"--slice {subset.slice}"] if subset.slice is not None else []
    return " ".join(parts) or "every task"
