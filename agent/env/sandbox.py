"""Run one shell command sealed off from the host: the only way agent and task code ever runs.

With bubblewrap (Debian package `bubblewrap`) every command gets:
- an allow-list of the machine: the system folders read-only, then only what the command needs
  (its Python prefixes, PATH and PYTHONPATH folders, the task's `read` folders) read-only, and
  the working folder (and any `writable` folder its `SandboxSpec` names) writable, beside a private
  /tmp that vanishes afterwards; no task folder, reference patch, other checkout or results;
- home folders (`$HOME`, /root, /home) empty, so `~/.ssh` and the like stay out;
- the workspace's `.git` read-only, so nothing the command does can plant git config or hooks;
- its own PID namespace and /proc: no harness process is visible (no /proc/<pid>/environ, no
  nsenter, no kill), and when the command ends every process it started ends with it;
- no network, no shared IPC, no kernel keyrings (a seccomp filter: the user keyring is the
  host's, so a key added in one sandbox would be found in the next and by the host), and
  limits: a cgroup for memory (shared memory included) and processes, for root too
  (agent.env.cgroup), sized tmpfs, and per process memory, file size and CPU time.

Output goes through a pipe to a reader that keeps only the head and the tail, so a command
that prints gigabytes costs a bounded amount of memory. Where bubblewrap cannot run, the
strongest fallback is used and `isolation().missing` says exactly what was not isolated.
"""

from __future__ import annotations

import os
import platform
import select
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from agent.env import cgroup

if TYPE_CHECKING:
    from agent.task import Task

DEFAULT_MAX_OUTPUT = 30_000
# Variables the target's commands may see; API keys are deliberately not among them.
PASSTHROUGH_ENV = (
    "HOME", "LANG", "LC_ALL", "TERM", "TMPDIR", "USER", "CUDA_VISIBLE_DEVICES", "CUDA_HOME",
    "LD_LIBRARY_PATH", "VIRTUAL_ENV", "OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS", "TORCH_HOME",
)
# Home folders are hidden wholesale, /tmp and /var/tmp replaced by private ones; `_needed_binds`
# says what is mounted back from under them.
HIDDEN_HOMES = ("/root", "/home")
PRIVATE_TMPS = ("/tmp", "/var/tmp")
# The machine's own software, shown read-only; every other folder of the root is absent inside.
SYSTEM_ROOTS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/sys", "/nix")
GPU_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
               "/dev/nvidia-caps", "/dev/dri")
# What each isolation mode leaves open, in words a report can carry.
NOT_ISOLATED = {
    "filesystem": "filesystem: commands can write outside the workspace and read home folders (~/.ssh, ~/.gitconfig)",
    "processes": "processes: commands can see, signal and outlive the harness (no PID namespace)",
    "network": "network: commands can reach the network",
}


@dataclass(frozen=True)
class Isolation:
    """How commands are sealed on this machine; `missing` names what is not isolated."""

    mode: str  # "bwrap", "unshare" (network only) or "none"
    missing: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return not self.missing


@dataclass(frozen=True)
class ResourceLimits:
    """Per-process limits (setrlimit), applied inside the sandbox before the command starts.

    Memory is RLIMIT_DATA, not RLIMIT_AS: CUDA reserves terabytes of address space it never
    touches. The kernel exempts root from the process count and RLIMIT_DATA misses tmpfs pages,
    so where it can the sandbox also gets a cgroup (agent.env.cgroup) that caps memory, shared
    memory included, and processes for all of its processes together, and each private tmpfs
    gets a size.
    """

    memory_bytes: int
    file_bytes: int = 8 << 30
    processes: int = 4096
    cpu_s: int | None = None  # default: the timeout times the cores, so threads can use them all

    @property
    def tmpfs_bytes(self) -> int:
        """The size of each private tmpfs (/tmp, /var/tmp, /dev/shm, the homes)."""
        return max(64 << 20, self.memory_bytes // 4)

    def describe(self) -> str:
        """The caps in words, for the report's environment."""
        gib = 1 << 30
        whole = (f"cgroup: memory {self.memory_bytes / gib:.1f} GiB with shared memory, {self.processes} processes"
                 if cgroup.available() else "no cgroup: memory and processes capped per process only")
        return f"{whole}; tmpfs {self.tmpfs_bytes / gib:.1f} GiB each; files {self.file_bytes / gib:.0f} GiB"

    @classmethod
    def default(cls) -> ResourceLimits:
        """75% of RAM and 4096 processes, unless PERFAGENT_SANDBOX_MEMORY ("8G", "512M") or
        PERFAGENT_SANDBOX_PROCESSES say otherwise."""
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            total = 16 << 30
        memory = _size(os.environ.get("PERFAGENT_SANDBOX_MEMORY", "")) or int(total * 0.75)
        processes = os.environ.get("PERFAGENT_SANDBOX_PROCESSES", "")
        return cls(memory_bytes=memory, processes=int(processes) if processes.isdigit() else cls.processes)

    def shell_prefix(self, timeout_s: float) -> str:
        cpu = self.cpu_s or int(timeout_s * (os.cpu_count() or 1)) + 60
        # bash's ulimit counts -d and -f in KiB; setting a value sets the hard limit too. One call each:
        # a limit that cannot be raised (already lower) must not keep the others from being set.
        limits = {"-d": self.memory_bytes // 1024, "-f": self.file_bytes // 1024, "-u": self.processes, "-t": cpu}
        return "".join(f"ulimit {flag} {value} 2>/dev/null; " for flag, value in limits.items()) + "\n"


def _size(text: str) -> int | None:
    """ "512M", "8G", "1073741824" -> bytes; None for anything else."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("B")
    number, unit = (text[:-1], text[-1]) if text[-1:] in ("K", "M", "G") else (text, "")
    return int(float(number) * units[unit]) if number.replace(".", "", 1).isdigit() else None


Readable = tuple[Path | tuple[Path, Path], ...]  # folders, or (folder, where the sandbox shows it) pairs


@dataclass(frozen=True)
class SandboxSpec:
    """What a sandboxed command may see and do besides its working folder, as one value the caller passes:
    built once per task (`for_task`), widened per call (`with_`). Never carried in the command's environment,
    which the command itself can read and change: what it may see is decided outside it."""

    read: tuple[Path, ...] = ()  # the task's `read` folders: shown read-only, as PATH's are (absolute,
    # existing, outside the system folders; checked when the command starts)
    readable: Readable = ()  # the caller's own folders (or (folder, place) pairs), shown read-only as named
    writable: tuple[Path, ...] = ()  # writable besides the working folder (the caller's output folders)
    limits: ResourceLimits | None = None  # None: ResourceLimits.default() when the command starts
    network: bool = False  # the host's network kept: a task's venv build only (its commands fetch packages)

    @classmethod
    def for_task(cls, task: Task) -> SandboxSpec:
        """Every command of `task`: its declared `read` folders, and no other folder of its own."""
        return cls(read=task.read)

    def with_(self, *, readable: tuple[str | Path, ...] = (), writable: tuple[str | Path, ...] = ()) -> SandboxSpec:
        """This spec and a call's own folders: `readable` shown read-only, `writable` writable."""
        return replace(self, readable=(*self.readable, *map(Path, readable)),
                       writable=(*self.writable, *map(Path, writable)))


@dataclass(frozen=True)
class CommandResult:
    command: str
    exit_code: int
    output: str  # stdout and stderr interleaved, capped
    duration_s: float
    timed_out: bool
    cut_bytes: int  # how many bytes of output were dropped from the middle
    isolation: str  # "bwrap", "unshare" or "none"
    # Seen from outside the command, out of its reach (agent.checks.confirm): its wall time from
    # start to exit (no output drain), and the CPU time the kernel charged it and every process
    # it started; None where not known.
    wall_s: float | None = None
    cpu_s: float | None = None
    # What the sweep after the command could not end (its cgroup, or the warm server's PID namespace,
    # did not empty); None when nothing it started is left. Never a pass: agent.checks.grade.
    escaped: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@lru_cache(maxsize=1)
def isolation() -> Isolation:
    """The strongest isolation this machine allows, probed once by running a real sealed command."""
    probe_dir = Path(os.path.realpath(os.getcwd()))
    if shutil.which("bwrap") and _probe_bwrap(probe_dir):
        return Isolation("bwrap", ())
    if shutil.which("unshare") and _probe(["unshare", "-n", "true"]):
        return Isolation("unshare", (NOT_ISOLATED["filesystem"], NOT_ISOLATED["processes"]))
    return Isolation("none", tuple(NOT_ISOLATED.values()))


def _probe(argv: list[str], pass_fds: tuple[int, ...] = ()) -> bool:
    try:
        return subprocess.run(argv, check=False, capture_output=True, timeout=20, pass_fds=pass_fds).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _probe_bwrap(cwd: Path) -> bool:
    with seccomp_filter() as seccomp:
        return _probe(_bwrap_argv(cwd, SandboxSpec(), {}, seccomp=seccomp) + ["true"], seccomp)


# -- the seccomp filter: classic BPF over (syscall number, architecture) ---------------------------
# add_key, request_key and keyctl per architecture: the user keyring belongs to the uid, shared with
# the host and every other sandbox, a channel no folder or namespace here closes.
_KEYRING_SYSCALLS = {"x86_64": (0xC000003E, (248, 249, 250)), "aarch64": (0xC00000B7, (217, 218, 219))}
_X32_BIT = 0x40000000  # x86_64's x32 ABI numbers the same calls from here up


@cache
def seccomp_program(machine: str | None = None) -> bytes | None:
    """The filter bwrap installs (`--seccomp FD`): the keyring calls, any other architecture's calls
    (i386 via int 0x80) and x86_64's x32 calls fail with EPERM; None where we have no table."""
    table = _KEYRING_SYSCALLS.get(machine or platform.machine())
    if table is None:
        return None
    arch, (add_key, request_key, keyctl) = table
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    allow, deny = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    x32 = _X32_BIT if arch == 0xC000003E else 0xFFFFFFFF
    program = [(ld, 0, 0, 4), (jeq, 0, 6, arch),  # seccomp_data.arch
               (ld, 0, 0, 0), (jge, 4, 0, x32),   # seccomp_data.nr
               (jeq, 3, 0, add_key), (jeq, 2, 0, request_key), (jeq, 1, 0, keyctl),
               (ret, 0, 0, allow), (ret, 0, 0, deny)]
    return b"".join(struct.pack("=HBBI", *ins) for ins in program)


@contextmanager
def seccomp_filter(wanted: bool = True) -> Iterator[tuple[int, ...]]:
    """The fds, none or one, holding the filter for `--seccomp` (see `sealed_argv`) while the block runs:
    the process started in it must inherit them (Popen's pass_fds)."""
    program = seccomp_program() if wanted else None
    if program is None:
        yield ()
        return
    fd = os.memfd_create("perfagent-seccomp")
    try:
        os.write(fd, program)
        os.lseek(fd, 0, os.SEEK_SET)
        yield (fd,)
    finally:
        os.close(fd)


def base_env(extra: dict[str, str] | None = None, *, bin_dir: Path | None = None) -> dict[str, str]:
    """A small, predictable environment, no secrets: first on PATH the task's own Python (`bin_dir`,
    see agent.env.interpreter) if it has one, else ours. What the sandbox shows is its `SandboxSpec`'s."""
    env = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
    env["PATH"] = os.pathsep.join([str(bin_dir or Path(sys.executable).parent),
                                   os.environ.get("PATH", "/usr/bin:/bin")])
    if bin_dir is not None:
        env.pop("VIRTUAL_ENV", None)
        if (bin_dir.parent / "pyvenv.cfg").is_file():
            env["VIRTUAL_ENV"] = str(bin_dir.parent)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


# -- the bubblewrap command line ----------------------------------------------------------------
def _bwrap_argv(cwd: Path, sandbox: SandboxSpec, env: dict[str, str], seccomp: tuple[int, ...] = (),
                tmpfs_bytes: int | None = None) -> list[str]:
    """An allow-list: the system folders, then exactly the folders the command needs (its Python,
    its PATH, its PYTHONPATH, the spec's `read` and `readable`) read-only and its own folders (`cwd`,
    the spec's `writable`) writable; nothing else of the machine exists inside (no task folder, no
    reference patch, no other checkout, no results). The spec's `network` keeps the host's network."""
    network = sandbox.network
    argv = ["bwrap"]
    for top in SYSTEM_ROOTS:
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    argv += ["--dev", "/dev", "--proc", "/proc"]
    for fd in seccomp:
        argv += ["--seccomp", str(fd)]
    size = ["--size", str(tmpfs_bytes)] if tmpfs_bytes else []
    homes = _hidden_homes()
    for tmp in (*PRIVATE_TMPS, "/dev/shm", *map(str, homes)):
        argv += [*size, "--tmpfs", tmp]
    for dev in GPU_DEVICES + tuple(str(p) for p in sorted(Path("/dev").glob("nvidia[0-9]*"))):
        argv += ["--dev-bind-try", dev, dev]
    for item in [*_needed_binds(env, sandbox.read), *sandbox.readable, *(_resolver_files() if network else ())]:
        source, place = item if isinstance(item, tuple) else (item, item)
        argv += ["--ro-bind-try", str(source), str(place)]
    for path in (cwd, *sandbox.writable):
        argv += ["--bind", str(path), str(path)]
    git_dir = cwd / ".git"
    if git_dir.is_dir():
        argv += ["--ro-bind", str(git_dir), str(git_dir)]
        for objects in _alternates(git_dir / "objects"):
            argv += ["--ro-bind-try", str(objects), str(objects)]
    return argv + ["--unshare-pid", *([] if network else ["--unshare-net"]), "--unshare-ipc", "--unshare-uts",
                   "--unshare-cgroup-try", "--cap-drop", "ALL", "--die-with-parent", "--new-session",
                   "--chdir", str(cwd), "--"]


def _resolver_files() -> list[Path]:
    """Where /etc's name-service files lead outside the system folders (a resolv.conf linked into
    /run by systemd-resolved): with the network kept, names must resolve too."""
    system = [Path(os.path.realpath(top)) for top in SYSTEM_ROOTS]
    out = []
    for name in ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/gai.conf"):
        real = Path(os.path.realpath(name))
        if real.exists() and not any(s in real.parents for s in system):
            out.append(real)
    return out


def scratch_places() -> tuple[str, ...]:
    """Where every sandboxed command can write besides the folders it is given: the private
    temporary folders, /dev/shm and the emptied home folders."""
    return (*PRIVATE_TMPS, "/dev/shm", *map(str, _hidden_homes()))


def _hidden_homes() -> list[Path]:
    homes = {Path(os.path.realpath(os.path.expanduser("~")))} | {Path(h) for h in HIDDEN_HOMES}
    return sorted(h for h in homes if h != Path("/") and h.is_dir())


def _needed_binds(env: dict[str, str], read: tuple[Path, ...] = ()) -> list[Path]:
    """Folders outside the system ones that commands still need, read-only: the Python prefixes (a venv
    in a temp checkout, pyenv under ~), PATH entries, PYTHONPATH (our check hook) and what the user names
    (PERFAGENT_SANDBOX_READ) or the task declares (`read`, its SandboxSpec's)."""
    wanted = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable),
              sysconfig.get_paths().get("purelib", ""), env.get("VIRTUAL_ENV", "")}
    python = shutil.which("python", path=env.get("PATH"))
    if python:
        wanted.add(str(Path(os.path.realpath(python)).parent.parent))
    for var, source in (("PATH", env), ("PYTHONPATH", env), ("PERFAGENT_SANDBOX_READ", os.environ)):
        wanted |= set(source.get(var, "").split(os.pathsep))
    wanted |= set(map(str, read))
    system = [Path(os.path.realpath(top)) for top in SYSTEM_ROOTS]
    out = set()
    for w in (w for w in wanted if os.path.isabs(w)):  # a relative PATH entry would bind our own cwd
        real = Path(os.path.realpath(w))
        if real.exists() and real != Path("/") and not any(real == s or s in real.parents for s in system):
            out.add(real)
    return sorted(out)


def hidden_paths(command: str, cwd: Path, env: dict[str, str], sandbox: SandboxSpec = SandboxSpec()) -> list[str]:
    """The absolute paths `command` names that exist on this machine but not in its sandbox (started
    in `cwd` with `env` and `sandbox`): what a task's command needs and the allow-list leaves out."""
    if isolation().mode != "bwrap":
        return []
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    shown = [Path(os.path.realpath(top)) for top in (*SYSTEM_ROOTS, "/dev", "/proc")]
    shown += [*_needed_binds(env, sandbox.read), Path(os.path.realpath(cwd))]
    shown += [Path(os.path.abspath(s)) for s in (*SYSTEM_ROOTS, cwd)]

    def visible(path: Path) -> bool:
        return any(path == s or s in path.parents for s in shown)

    out = []
    for name in (part for word in words for part in word.split("=") if part.startswith("/")):
        # both where it is named and where it leads must be there: a venv's python is a link out of it
        here, real = Path(os.path.abspath(name)), Path(os.path.realpath(name))
        if real.exists() and not (visible(here) and visible(real)) and name not in out:
            out.append(name)
    return out


def _alternates(objects: Path, depth: int = 0) -> list[Path]:
    """Object folders a shared clone borrows from (recursively), so git still works read-only."""
    try:
        lines = (objects / "info" / "alternates").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        alt = Path(os.path.realpath(objects / line.strip())) if line.strip() else None
        if alt is not None and alt.is_dir() and depth < 5:
            out += [alt, *_alternates(alt, depth + 1)]
    return out


def sealed_argv(command: str, cwd: Path, mode: str, sandbox: SandboxSpec, env: dict[str, str],
                limits: ResourceLimits, timeout_s: float, seccomp: tuple[int, ...] = ()) -> list[str]:
    """The command line that runs `command` sealed as `sandbox` says (its folders as given: see
    `resolved`); `seccomp`: the fds of `seccomp_filter`."""
    shell = ["bash", "-c", limits.shell_prefix(timeout_s) + command]
    if mode == "bwrap":
        return _bwrap_argv(cwd, sandbox, env, seccomp, limits.tmpfs_bytes) + shell
    if mode == "unshare" and not sandbox.network:
        return ["unshare", "-n", "--", *shell]
    return shell


# -- running --------------------------------------------------------------------------------------
# A subreaper between us and bubblewrap, for `run_command(account_cpu=True)`: the sandbox's CPU time
# (agent/env/reaper.py says how). It runs on the host, out of the sandbox's reach; ~12 ms.
REAPER = Path(__file__).with_name("reaper.py")


class _CappedReader(threading.Thread):
    """Drains a pipe into one fixed buffer, keeping the first and last `limit // 2` bytes only."""

    def __init__(self, fd: int, limit: int):
        super().__init__(daemon=True, name="sandbox-output")
        self.pipe = open(fd, "rb", buffering=0, closefd=False)  # noqa: SIM115 — read for the thread's life; fd not ours
        self.half = max(1, limit // 2)
        self.head, self.tail = bytearray(), bytearray()
        self.total = 0
        self.stop_at: float | None = None  # set when the command has ended: drain, then give up

    def run(self) -> None:
        buf = memoryview(bytearray(1 << 16))
        while True:
            ready, _, _ = select.select([self.pipe], [], [], 0.1)
            if self.stop_at is not None and (not ready or time.monotonic() > self.stop_at):
                return
            if not ready:
                continue
            n = self.pipe.readinto(buf)
            if not n:
                return
            self.total += n
            room = max(0, self.half - len(self.head))
            self.head += buf[:min(room, n)]
            self.tail += buf[min(room, n):n]
            if len(self.tail) > 4 * self.half:
                del self.tail[:-self.half]

    def text(self) -> tuple[str, int]:
        tail = bytes(self.tail[-self.half:])
        cut = self.total - len(self.head) - len(tail)
        if cut <= 0:
            return (bytes(self.head) + tail).decode("utf-8", "replace"), 0
        return (self.head.decode("utf-8", "replace") + f"\n[... {cut} bytes of output cut ...]\n"
                + tail.decode("utf-8", "replace")), cut


def run_command(
    command: str,
    cwd: str | Path,
    *,
    sandbox: SandboxSpec = SandboxSpec(),
    timeout_s: float = 600,
    env: dict[str, str] | None = None,
    max_output: int = DEFAULT_MAX_OUTPUT,
    cancel: threading.Event | None = None,
    pass_fds: tuple[int, ...] = (),
    account_cpu: bool = False,
) -> CommandResult:
    """Run `command` with bash in `cwd`, sealed as `sandbox` says; never raises for the command's own failures.

    `cwd` is writable; so is each of the spec's `writable` folders (the caller's own output folders);
    its `read` and `readable` paths are mounted back read-only where a hidden folder covers them; no
    network unless it says so (only a task's venv build needs it). Setting `cancel` ends the command
    as a timeout does (a relay that has seen the budget spent). `pass_fds` are inherited by the
    command (a key the check hook reads, agent.checks.correctness). `account_cpu`: the result's
    `cpu_s` is the CPU time of every process of the sandbox (bubblewrap only).
    """
    cwd = Path(os.path.realpath(cwd))
    env = env if env is not None else base_env()
    mode = isolation().mode
    limits = sandbox.limits or ResourceLimits.default()
    group = cgroup.Cgroup.create(limits.memory_bytes, limits.processes) if mode == "bwrap" else None
    with seccomp_filter(mode == "bwrap") as seccomp:
        argv = sealed_argv(command, cwd, mode, resolved(sandbox), env, limits, timeout_s, seccomp)
        account_cpu = account_cpu and mode == "bwrap"  # elsewhere an orphan may outlive the command
        if account_cpu:
            argv = [sys.executable, "-I", "-S", str(REAPER), *argv]
        start = time.monotonic()
        read_fd, write_fd = os.pipe()
        try:
            proc = subprocess.Popen(group.wrap(argv) if group else argv, cwd=str(cwd), env=env,
                                    stdin=subprocess.DEVNULL, stdout=write_fd, stderr=write_fd,
                                    start_new_session=True,  # own group: a timeout kills all
                                    pass_fds=(*seccomp, *pass_fds))
        except BaseException:
            os.close(read_fd)
            if group:
                group.remove()
            raise
        finally:
            os.close(write_fd)
    reader = _CappedReader(read_fd, max_output)
    reader.start()
    timed_out = cancelled = False
    wall_s = cpu_s = None
    try:
        cancelled, cpu_s = _wait(proc, start + timeout_s, cancel)
        timed_out = proc.returncode is None and not cancelled
        wall_s = time.monotonic() - start if proc.returncode is not None else None
    finally:
        _kill_group(proc)
        emptied = group.remove() if group else True
        reader.stop_at = time.monotonic() + 2  # unsandboxed, a daemon may hold the pipe open
        reader.join()
        os.close(read_fd)
    text, cut = reader.text()
    code = proc.returncode if not (timed_out or cancelled) else -signal.SIGKILL
    if timed_out:
        text += f"\n[timed out after {timeout_s:g}s; every process of the command killed]"
    elif cancelled:
        text += "\n[cancelled; every process of the command killed]"
    escaped = None if emptied or group is None else (
        f"processes the command started could not be ended: its cgroup ({group.dirs[0].name}) did not empty")
    return CommandResult(command, code, text, time.monotonic() - start, timed_out, cut, mode, wall_s,
                         cpu_s if account_cpu else None, escaped)


def real_paths(paths: tuple[str | Path, ...]) -> tuple[Path, ...]:
    """Each path with its symlinks resolved, as the sandbox binds it."""
    return tuple(Path(os.path.realpath(p)) for p in paths)


def resolved(sandbox: SandboxSpec) -> SandboxSpec:
    """`sandbox` with its `readable` and `writable` folders' symlinks resolved, as bubblewrap binds them
    (a (folder, place) pair is kept as its caller named it)."""
    readable = tuple(r if isinstance(r, tuple) else Path(os.path.realpath(r)) for r in sandbox.readable)
    return replace(sandbox, readable=readable, writable=real_paths(sandbox.writable))


def _wait(proc: subprocess.Popen, deadline: float, cancel: threading.Event | None) -> tuple[bool, float | None]:
    """Wait for the command until `deadline`; (True if `cancel` was set first (the command still
    runs), the CPU time of the command and everything it reaped, from `os.wait4`; None if unknown).

    A pidfd says when it has ended without reaping it, so `wait4` then reaps it at once and returns
    its rusage (Popen.wait would discard it); where there is no pidfd, Popen.wait as before.
    """
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return _wait_plain(proc, deadline, cancel), None
    try:
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([pidfd], [], [], max(0.0, min(left, 0.2 if cancel is not None else left)))
            if ready:
                _, status, usage = os.wait4(proc.pid, 0)
                proc.returncode = os.waitstatus_to_exitcode(status)
                return False, usage.ru_utime + usage.ru_stime
            if cancel is not None and cancel.is_set():
                return True, None
            if left <= 0:
                return False, None
    finally:
        os.close(pidfd)


def _wait_plain(proc: subprocess.Popen, deadline: float, cancel: threading.Event | None) -> bool:
    while True:
        left = deadline - time.monotonic()
        try:
            proc.wait(timeout=max(0.0, min(left, 0.2 if cancel is not None else left)))
            return False
        except subprocess.TimeoutExpired:
            if cancel is not None and cancel.is_set():
                return True
            if left <= 0:
                return False


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill whatever is left of the command's process group (stray background children too)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
