"""Run ids and job names: plain folder names, checked once for every command, so no output lands
outside --out whatever a user (or a task file) passes."""

from __future__ import annotations

import re
import time
import uuid

from agent.errors import BadInput

# A run id, and each `/`-separated segment of a job name: a plain folder name, never `..` or absolute.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class BadName(BadInput, ValueError):
    """A run id or job name that is not a plain folder name: one line for the user."""


def check_run_id(run_id: str) -> str:
    """`run_id` if it is a safe folder name; the one check every command and the runner share."""
    if not NAME.fullmatch(run_id):
        raise BadName(f"invalid run id {run_id!r}: use 1-128 of A-Z a-z 0-9 . _ -, starting with a letter or digit")
    return run_id


def check_job(job: str) -> str:
    """`job` if it is one or more `/`-separated safe folder names (batch jobs are task/model/s<k>)."""
    if not all(NAME.fullmatch(part) for part in job.split("/")):
        raise BadName(f"invalid job name {job!r}: use /-separated names of 1-128 of A-Z a-z 0-9 . _ -, "
                      "each starting with a letter or digit")
    return job


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
