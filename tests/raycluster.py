"""A real two-node Ray cluster on this machine that nothing reaches and that reaches nothing.

Ray advertises the machine's own address even when told 127.0.0.1, so the cluster and the batches
run inside namespaces of their own (`unshare`; root, or a kernel that lets users have them): a
network namespace whose only interface is `lo`, a PID namespace (its first process reaps, and
when it goes, the kernel kills everything in it: no Ray process outlives the tests), and a mount
namespace with its own /proc (`ray stop` and `ps` there see this cluster only).

The head node is started as `ray start --head`. The worker node runs in a nested PID and mount
namespace of its own, so it can be lost whole (`kill_worker`: its first process is killed, and
every process of the node with it, as when a machine dies), started from another folder, with
the batch's files and the checkout's `agent/` package hidden under empty tmpfs mounts: what its
jobs read of the task and the harness can only have come through Ray. Each node has a custom
resource named after it ("head", "w1"); the worker declares `gpus` GPUs (Ray takes the count on
trust, so a CPU machine can test GPU leases).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import agent

PORT = 6379
ADDRESS = f"127.0.0.1:{PORT}"
RAY = str(Path(sys.executable).with_name("ray"))
# Init of the outer PID namespace: reap every orphan; exit (and so end the namespace) when stdin closes.
INIT = textwrap.dedent("""
    import os, sys, threading, time
    def reap():
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                time.sleep(0.1)
    threading.Thread(target=reap, daemon=True).start()
    sys.stdin.buffer.read()
    os._exit(0)
""")
# Ray's own timings, shortened for a test cluster: a node that stops answering is declared dead in ~3 s.
FAST = {"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3",
        "RAY_health_check_initial_delay_ms": "1000", "RAY_USAGE_STATS_ENABLED": "0"}


def unshare_works() -> str | None:
    """None where namespaces can be made here, else why not (a test is then skipped with it)."""
    if not shutil.which("unshare") or not shutil.which("nsenter"):
        return "unshare/nsenter not found (util-linux)"
    probe = subprocess.run(["unshare", "-n", "-p", "-f", "-m", "--mount-proc", "true"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"cannot make namespaces here: {probe.stderr.strip()[:200]}"


def children(pid: int) -> list[int]:
    out = []
    for f in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            out += [int(p) for p in f.read_text().split()]
        except OSError:
            pass
    return out


def _child(pid: int, timeout: float = 10) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = children(pid)
        if kids:
            return kids[0]
        time.sleep(0.02)
    raise RuntimeError(f"process {pid} started no child")


class Cluster:
    """`with Cluster(hide=[...]) as c:` a head and a worker node, up; everything gone after."""

    def __init__(self, *, hide: list[Path] = (), gpus: int = 1, cpus: int = 2, head_cpus: int = 2):
        self.hide = [Path(p) for p in hide] + [Path(agent.__file__).parent]
        self.gpus, self.cpus, self.head_cpus = gpus, cpus, head_cpus
        self.dir = Path(tempfile.mkdtemp(prefix="pa-ray-"))  # short: Ray's socket paths must fit 107 bytes
        self.init_pid = 0
        self.worker: subprocess.Popen | None = None
        self.node_ids: dict[str, str] = {}

    # -- life --------------------------------------------------------------------------------------
    def __enter__(self) -> "Cluster":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self._holder = subprocess.Popen(["unshare", "-n", "-p", "-f", "-m", "--mount-proc", sys.executable, "-c", INIT],
                                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.init_pid = _child(self._holder.pid)
        self.run(["ip", "link", "set", "lo", "up"], check=True)
        for d in ("head", "htmp", "home", "worker", "wtmp", "wcwd"):
            (self.dir / d).mkdir()
        head = self.run([RAY, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={PORT}",
                         f"--num-cpus={self.head_cpus}", "--num-gpus=0", "--resources", json.dumps({"head": 1}),
                         f"--temp-dir={self.dir / 'head'}", "--include-dashboard=false", "--disable-usage-stats"],
                        env=self.env("htmp"), capture_output=True, text=True, cwd=self.dir)
        if head.returncode != 0:
            raise RuntimeError(f"ray start --head failed: {head.stderr[-2000:]}")
        self.start_worker()

    def start_worker(self) -> None:
        """The worker node, in a nested PID and mount namespace, with the batch's paths hidden."""
        hide = " && ".join(f"mount -t tmpfs -o size=1m,mode=000 none {p}" for p in self.hide) or "true"
        log = self.dir / "worker.log"
        script = (f"{hide} && cd {self.dir / 'wcwd'} && exec {RAY} start --address={ADDRESS} "
                  f"--node-ip-address=127.0.0.1 --num-cpus={self.cpus} --num-gpus={self.gpus} "
                  f"--resources '{json.dumps({'w1': 1})}' --temp-dir={self.dir / 'worker'} --block >{log} 2>&1")
        self.worker = self.popen(["unshare", "-p", "-f", "--kill-child", "-m", "--mount-proc", "bash", "-c", script],
                                 env=self.env("wtmp"))
        before = set(self.node_ids.values())
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ids = self.nodes()
            if "w1" in ids and ids["w1"] not in before:
                self.node_ids = ids
                return
            if self.worker.poll() is not None:
                break
            time.sleep(0.5)
        raise RuntimeError(f"the worker node did not join: {log.read_text()[-2000:] if log.exists() else ''}")

    def kill_worker(self) -> None:
        """Lose the worker node whole: its namespace's first process dies, the kernel kills the rest."""
        if self.worker is None:
            return
        unshare = children(self.worker.pid)  # nsenter's child: the nested namespace's `unshare --kill-child`
        for pid in unshare:
            os.kill(pid, signal.SIGKILL)
        self.worker.wait()
        self.worker = None

    def stop(self) -> None:
        if self.worker is not None:
            self.kill_worker()
        holder = getattr(self, "_holder", None)
        if holder is not None:
            holder.stdin.close()  # init exits: the kernel kills every process of the namespace
            holder.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- inside --------------------------------------------------------------------------------------
    def env(self, tmp: str = "htmp", **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        return {**env, **FAST, "HOME": str(self.dir / "home"), "TMPDIR": str(self.dir / tmp), **extra}

    def _enter(self, argv: list[str]) -> list[str]:
        return ["nsenter", "-t", str(self.init_pid), "-n", "-p", "-m", "--", *argv]

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        kw.setdefault("env", self.env())
        return subprocess.run(self._enter(argv), **kw)

    def popen(self, argv: list[str], **kw) -> subprocess.Popen:
        kw.setdefault("env", self.env())
        return subprocess.Popen(self._enter(argv), **kw)

    def nodes(self) -> dict[str, str]:
        """{custom resource: node id} of the nodes alive."""
        code = (f"import json, ray; ray.init(address='{ADDRESS}', logging_level='ERROR'); "
                "print(json.dumps({r: n['NodeID'] for n in ray.nodes() if n['Alive'] "
                "for r in n['Resources'] if r in ('head', 'w1')}))")
        out = self.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       )
        return json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout.strip() else {}

    def ps(self) -> list[tuple[int, int, str]]:
        """(pid, parent pid, command line) of every live process of the cluster's namespace, both nodes."""
        out = self.run(["ps", "-eo", "pid=,ppid=,stat=,args="], capture_output=True, text=True).stdout
        rows = [line.split(None, 3) for line in out.splitlines()]
        return [(int(r[0]), int(r[1]), r[3]) for r in rows if len(r) == 4 and not r[2].startswith("Z")]

    def procs(self, pattern: str, *, exact: bool = False) -> list[str]:
        """Live processes whose command line has `pattern` (or is it)."""
        return [args for _, _, args in self.ps() if (args.strip() == pattern if exact else pattern in args)]

    def job_procs(self) -> list[str]:
        """Batch job processes (forks of a Ray worker's fork server) and Ray workers running a batch job."""
        rows = self.ps()
        servers = {pid for pid, _, args in rows if "agent.batch.forkserver" in args}
        return [args for pid, ppid, args in rows if ppid in servers and "agent.batch.forkserver" in args
                or args.startswith("ray::perfagent ")]
