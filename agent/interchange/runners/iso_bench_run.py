"""Written by `perfagent tasks import --format iso-bench` for one commit pair of an ISO-Bench task config: the
config's runtime metric command as the task's bench and its check. What differs per task is in iso_bench_run.json
beside this file (read at run time: the config's text is data here, never code): the metric's name and the
command as an argv (run without a shell, from the checkout).

check: runs the command once; a command that fails prints `FAILED bench - <why>`; exit 1.
perf: runs the command once and prints {"metric": <metric>, "value": <the last number it printed>}.

Stdlib only, Python 3.9+: this runs in the task's interpreter.
"""

import json
import os
import re
import subprocess
import sys

NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def settings():
    """iso_bench_run.json: {"instance", "metric", "argv"}."""
    with open(os.path.splitext(os.path.abspath(__file__))[0] + ".json", encoding="utf-8") as f:
        data = json.load(f)
    argv = data["argv"]
    if not argv or not all(isinstance(a, str) for a in argv):
        raise SystemExit("iso_bench_run.json: argv must be a list of strings")
    if argv[0] in ("python", "python3"):  # the task's interpreter, as the config's `python` means
        argv = [sys.executable, *argv[1:]]
    return data["metric"], argv


def run(argv):
    return subprocess.run(argv, capture_output=True, text=True)


def main(args):
    metric, argv = settings()
    if args not in (["check"], ["perf"]):
        print("usage: iso_bench_run.py check | perf", file=sys.stderr)
        return 2
    res = run(argv)
    sys.stdout.write(res.stdout)
    sys.stderr.write(res.stderr)
    if res.returncode != 0:
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        print(f"FAILED bench - exit {res.returncode}: {lines[-1] if lines else 'no output'}")
        return 1
    if args == ["check"]:
        print("PASSED bench")
        return 0
    numbers = NUMBER.findall(res.stdout)
    if not numbers:
        print(f"FAILED bench - it printed no number for {metric}")
        return 1
    print(json.dumps({"metric": metric, "value": float(numbers[-1])}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
