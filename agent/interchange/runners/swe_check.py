"""Written by `perfagent tasks import` for a SWE-bench instance: runs the instance's tests with pytest, in this
process (where the harness's instruments see them), on the test files their ids name. What differs per task is
in swe_check.json beside this file (read at run time: the record's text is data here, never code).

Every test in FAIL_TO_PASS must pass (or xfail), and every test in PASS_TO_PASS must pass, xfail or be skipped
(SWE-bench's grading: a skipped PASS_TO_PASS test is no regression, a skipped FAIL_TO_PASS test no fix), except on
the unchanged base (with only the task's setup applied: the test patch), where FAIL_TO_PASS tests fail by
definition and only PASS_TO_PASS must. A test id cut off inside its parameters (more `[` than `]`, as hundreds of
SWE-bench Verified's are) stands for the tests it begins, when they all agree, as SWE-bench resolves it.
A required test that did not pass prints `FAILED <id> - <why>`; exit 1.

Stdlib and pytest only, Python 3.9+: this runs in the task's interpreter.
"""

import json
import os
import subprocess
import sys

import pytest


def settings():
    """swe_check.json: {"instance", "base", "FAIL_TO_PASS", "PASS_TO_PASS", "setup_paths"}; setup_paths are what
    the task's setup (the test patch) changes, never the candidate's change."""
    with open(os.path.splitext(os.path.abspath(__file__))[0] + ".json", encoding="utf-8") as f:
        data = json.load(f)
    return data["base"], data["FAIL_TO_PASS"], data["PASS_TO_PASS"], data["setup_paths"]


def git(*args):
    env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    return subprocess.run(["git", *args], capture_output=True, text=True, env=env)


def unchanged_base(base, setup_paths):
    """HEAD is the base commit and no tracked file differs from it but those the setup changes."""
    head = git("rev-parse", "HEAD")
    if head.returncode != 0 or head.stdout.strip() != git("rev-parse", "--verify", base + "^{commit}").stdout.strip():
        return False
    diff = git("diff", "--name-only", "--no-ext-diff", "--no-textconv", base, "--", ".",
               *(":(exclude,literal)" + p for p in setup_paths))
    return diff.returncode == 0 and not diff.stdout.strip()


class Outcomes:
    def __init__(self):
        self.seen = {}

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.seen[report.nodeid] = f"failed ({report.when})"
        elif report.skipped:
            xfail = hasattr(report, "wasxfail")
            self.seen.setdefault(report.nodeid, "passed" if xfail else "skipped")
        elif report.when == "call":
            self.seen.setdefault(report.nodeid, "passed")


def outcome(test, seen):
    """What `test` did: its own id, or a cut-off parametrized id's tests when they agree; None: not run."""
    if test in seen:
        return seen[test]
    if test.count("[") > test.count("]"):
        matches = [k for k in seen if k.startswith(test)]
        if matches and len({seen[k] == "passed" for k in matches}) == 1:
            return seen[matches[0]]
    return None


def node_file(test_id):
    """The file a test id names, never read as a pytest option."""
    path = test_id.split("::")[0]
    return "./" + path if path.startswith("-") else path


def main():
    base_commit, fail_to_pass, pass_to_pass, setup_paths = settings()
    base = unchanged_base(base_commit, setup_paths)
    required = pass_to_pass if base else fail_to_pass + pass_to_pass
    files = list(dict.fromkeys(node_file(t) for t in fail_to_pass + pass_to_pass))
    outcomes = Outcomes()
    pytest.main(["-q", "-p", "no:cacheprovider", "--rootdir", os.getcwd(), *files], plugins=[outcomes])
    kept = set(pass_to_pass)  # a skipped PASS_TO_PASS test is no regression
    done = {t: outcome(t, outcomes.seen) for t in required}
    failed = [(t, done[t] or "not run: no such test") for t in required
              if not (done[t] == "passed" or (t in kept and done[t] == "skipped"))]
    for test, why in failed:
        print(f"FAILED {test} - {why}")
    if base:
        print("the unchanged base: FAIL_TO_PASS tests are not required here (they fail by definition)")
    print(f"{len(required) - len(failed)} of {len(required)} required test(s) passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
