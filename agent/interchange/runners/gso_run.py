"""Written by `perfagent tasks import` for a GSO instance: GSO's performance tests as the task's checks. What
differs per task is in gso_run.json beside this file (read at run time: the record's text is data here, never
code): the base commit, the test scripts, the metric. Each script defines run_test(eqcheck, reference,
file_prefix) -> seconds, as GSO's harness calls it.

check: each test's result on the unchanged base is stored first, from that commit's source (`git archive`, in a
separate process, memory not poisoned), then the checkout's code runs the test again with eqcheck against it, in
this process (where the harness's instruments see it). A test that fails prints `FAILED <name> - <why>`; exit 1.
perf: each test once, neither flag; prints {"metric": <metric>, "value": <the sum of their seconds>, "unit": "s"}.

As GSO's harness runs them (in /testbed), both halves run from a repository root: the base's half from its
archived tree, the checkout's from the checkout, so a test that reads the repository's files through the working
folder reads the tree it grades. Their environments differ only in the harness's instruments (PERFAGENT_*) and in
which tree is first on PYTHONPATH. What a test writes goes to a scratch folder: the result files (GSO's
--file_prefix) are named there, and the checkout's half stands in a scratch folder that links every name of the
checkout's root (scratch_root), so a file a test writes in its working folder never lands in the tree graded.

Stdlib only, Python 3.9+: this runs in the task's interpreter.
"""

import io
import json
import os
import runpy
import subprocess
import sys
import tarfile
import tempfile
import timeit
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
# GSO's scripts time with timeit and take (seconds, return value) back: the template its harness sets.
TEMPLATE = """
def inner(_it, _timer{init}):
    {setup}
    _t0 = _timer()
    for _i in _it:
        retval = {stmt}
    _t1 = _timer()
    return _t1 - _t0, retval
"""


def settings():
    """gso_run.json: {"instance", "base", "scripts", "metric"}."""
    with open(os.path.splitext(os.path.abspath(__file__))[0] + ".json", encoding="utf-8") as f:
        data = json.load(f)
    scripts = data["scripts"]
    for name in scripts:  # the names import wrote: files beside this one, never a path elsewhere
        if os.path.basename(name) != name or name.startswith("."):
            raise SystemExit(f"gso_run.json: script {name!r} is not a file name")
    return data["base"], scripts, data["metric"]


def run_test(name, eqcheck=False, reference=False, prefix=""):
    timeit.template = TEMPLATE
    scope = runpy.run_path(os.path.join(HERE, name), run_name="gso_test")
    return float(scope["run_test"](eqcheck, reference, prefix))


def base_tree(work, base):
    """The base commit's source, for the reference results."""
    tree = os.path.join(work, "base")
    os.makedirs(tree)
    env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    data = subprocess.run(["git", "archive", "--format=tar", base + "^{commit}"], capture_output=True, env=env,
                          check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(tree, filter="data")
        else:
            tar.extractall(tree)
    return tree


def scratch_root(root, scratch):
    """A folder in `scratch` that lists what `root` lists, each name a link to the checkout's own: a test standing
    there reads the repository's files as from its root, and what it writes there stays in `scratch`, never in the
    tree graded (nor in the runs beside it, which share the checkout). Folders are links: a file written inside
    one lands in the checkout, as in GSO's /testbed."""
    farm = os.path.join(scratch, "root")
    if not os.path.isdir(farm):
        os.makedirs(farm)
        for name in os.listdir(root):
            os.symlink(os.path.join(root, name), os.path.join(farm, name))
    return farm


def run_here(name, scratch, **flags):
    """run_test standing in the checkout's root as seen from `scratch` (scratch_root), back where it was after."""
    here = os.getcwd()
    os.chdir(scratch_root(here, scratch))
    try:
        return run_test(name, **flags)
    finally:
        os.chdir(here)


def last_line(text):
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def check(base, scripts):
    work = tempfile.mkdtemp(prefix="gso-check-")
    try:
        tree = base_tree(work, base)
    except (subprocess.CalledProcessError, OSError, tarfile.TarError) as e:
        print(f"FAILED base - cannot read the base commit {base} from git: {e}")
        return 1
    here = os.path.realpath(os.getcwd())
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    path = [tree] + [p for p in path if os.path.realpath(p) != here]
    # the base runs clean: no poisoned memory, nothing recorded (the harness's settings stay with this process)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFAGENT_")}
    env["PYTHONPATH"] = os.pathsep.join(path)
    failed = 0
    for i, name in enumerate(scripts):
        prefix = os.path.join(work, f"gso_{i}")
        # from the base's repository root, as the candidate's half runs from the checkout's
        ref = subprocess.run([sys.executable, os.path.abspath(__file__), "reference", name, prefix], cwd=tree,
                             env=env, capture_output=True, text=True)
        if ref.returncode != 0:
            print(ref.stdout + ref.stderr)
            print(f"FAILED {name} - the unchanged base could not store its result: {last_line(ref.stderr)}")
            failed += 1
            continue
        try:
            seconds = run_here(name, work, eqcheck=True, prefix=prefix)
        except Exception as e:  # noqa: BLE001 - any failure of the test is the verdict
            traceback.print_exc()
            print(f"FAILED {name} - {type(e).__name__}: {e}")
            failed += 1
        else:
            print(f"PASSED {name} ({seconds:.6f} s)")
    print(f"{len(scripts) - failed} passed, {failed} failed")
    return 1 if failed else 0


def perf(scripts, metric):
    work = tempfile.mkdtemp(prefix="gso-perf-")
    total = sum(run_here(name, work, prefix=os.path.join(work, f"gso_{i}")) for i, name in enumerate(scripts))
    print(json.dumps({"metric": metric, "value": total, "unit": "s"}))
    return 0


def main(argv):
    base, scripts, metric = settings()
    if argv[:1] == ["reference"] and len(argv) == 3 and argv[1] in scripts:
        run_test(argv[1], reference=True, prefix=argv[2])
        return 0
    if argv == ["check"]:
        return check(base, scripts)
    if argv == ["perf"]:
        return perf(scripts, metric)
    print("usage: gso_run.py check | perf", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
