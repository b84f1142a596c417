"""A warm interpreter inside one sandbox: it imports the heavy modules once, then forks a fresh
child per command, so a test run no longer pays torch's start-up.

Runs as a script in the *target's* interpreter (stdlib only, CPython 3.9+), started by
`agent.env.warm`. Requests and replies are JSON lines on two pipes at the fds PERFAGENT_CONTROL
names, which no other process in the sandbox holds (bwrap's init closes them). Each child
- is forked before it imports any of the workspace's code, so every run is a separate
  process of the code under test;
- gets its own session and a capped pipe for stdout + stderr;
- leaves no process behind: after it ends, every other process in the sandbox's PID
  namespace is killed (and reaped) until none is left, so one run cannot leave a daemon behind
  for the next, and the reply says so (`escaped`) where that could not be done;
- may run in a folder of its own (`cwd`, with `path` put where PYTHONPATH would be), for a
  server shared by several checkouts (agent.checks.perf's bench rounds); such a server also
  empties every writable place (PERFAGENT_WIPE) after each child, restores /dev and removes
  SysV IPC objects (and allows no POSIX message queue), so no child leaves anything for the
  next, and says when it could not.
The server makes itself non-dumpable first, so no child can ptrace it or write its memory.
Every child shares its server's memory layout, a bias that differs per server: timing compares
only children of one server.
"""

import builtins
import ctypes
import fcntl
import gc
import importlib.machinery
import json
import os
import resource
import runpy
import select
import signal
import struct
import sys
import termios
import time
import traceback
import types
import weakref

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
IPC_RMID = 0
SWEEP_S = 5  # how long the sweep after a child may try to empty the namespace before it says it could not
# Landlock (Linux 5.13+, no privilege needed): syscalls 444-446 on x86_64 and aarch64 alike.
LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_RULE_PATH_BENEATH, LANDLOCK_CREATE_RULESET_VERSION = 1, 1
READ_ANY = 1 | 4 | 8  # LANDLOCK_ACCESS_FS_EXECUTE | READ_FILE | READ_DIR
READ_FILE = 1 | 4


def _ancestors():
    """This process and its parents (bwrap's init, the shell), which must survive the sweep."""
    keep, pid = set(), os.getpid()
    while pid > 0 and pid not in keep:
        keep.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return keep


def _holders(fds):
    """Every other process of the sandbox that holds one of the pipes `fds` (and so could read our
    requests or forge our replies): whatever this process can see of them, a child could too."""
    mine = {(st.st_dev, st.st_ino) for st in map(os.fstat, fds)}
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()):
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for name in names:
            try:
                st = os.stat(f"/proc/{pid}/fd/{name}")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in mine:
                found.append(f"/proc/{pid}/fd/{name}")
    return found


def _cpu(usage):
    return usage.ru_utime + usage.ru_stime


def _sweep(keep):
    """Kill every process of the namespace but ours, until none is left or SWEEP_S has passed, and
    reap them; (the CPU time of those we reaped, the pids still there at the end). The server is
    their subreaper, so what a child left behind (running, or ended and not waited for) is ours to
    reap and its CPU time is counted: work moved into an orphan is not hidden from `cpu_s`.

    A kill by pid races a process that forks and exits every few ms: it has a new pid before the
    kill lands. Where the server and bwrap's init are all there is to keep, kill(-1, SIGKILL) ends
    every other process of the namespace in one call (the kernel spares only PID 1 and the caller,
    and a fork under way gets the signal too), so nothing slips between a listing and a kill.
    Elsewhere each round stops every process it lists (a stopped process forks no more), then
    kills them all; the rounds go on while one is left."""
    cpu = 0.0
    alone = keep <= {1, os.getpid()} and _comm(1) == "bwrap"
    deadline = time.monotonic() + SWEEP_S
    while True:
        cpu += _reap_orphans(None)
        others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in keep]
        if not others:
            return cpu, []
        if time.monotonic() > deadline:
            return cpu, others
        if alone:
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
        else:
            for sig in (signal.SIGSTOP, signal.SIGKILL):
                for pid in others:
                    try:
                        os.kill(pid, sig)
                    except OSError:
                        pass
        time.sleep(0.001)


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _reap_orphans(child):
    """Reap every ended process that is ours but `child` (left for `_collect`'s own wait): what a
    child left, reparented to the server, would pile up as zombies while it runs (a fork loop
    leaves one every few ms). Their CPU time."""
    cpu = 0.0
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return cpu
        if info is None or info.si_pid == child:
            return cpu
        try:
            cpu += _cpu(os.wait4(info.si_pid, 0)[2])
        except ChildProcessError:
            pass


def _wipe(folder):
    """Remove everything under `folder` but the sandbox's mount points and the folders that lead
    to them; (nothing a child made is left, some mount point lies below)."""
    if not os.path.isdir(folder):
        return True, False
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return False, False
    clean, mounts = True, False
    for entry in entries:
        if os.path.ismount(entry.path):
            mounts = True
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                os.chmod(entry.path, 0o700)  # a child may have made it unreadable
                sub_clean, sub_mounts = _wipe(entry.path)
                clean, mounts = clean and sub_clean, mounts or sub_mounts
                if not sub_mounts:
                    os.rmdir(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            clean = False
    return clean, mounts


def _dev_entries():
    """/dev's entries and their inodes (bwrap's --dev is a writable tmpfs of its own)."""
    try:
        return {e.name: e.inode() for e in os.scandir("/dev")}
    except OSError:
        return {}


def _restore_dev(before):
    """Remove what a child added to /dev; False if it replaced or removed an entry that was there."""
    clean = True
    for name, inode in _dev_entries().items():
        path = os.path.join("/dev", name)
        if name in before:
            clean = clean and before[name] == inode
            continue
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                clean = _wipe(path)[0] and clean
                os.rmdir(path)
            else:
                os.unlink(path)
        except OSError:
            clean = False
    return clean and set(before) <= set(_dev_entries())


def _remove_sysv_ipc():
    """Remove the SysV shared memory segments, message queues and semaphores a child left in the
    sandbox's IPC namespace (which all children share); False if one stays."""
    libc = ctypes.CDLL(None)
    clean = True
    for kind in ("shm", "msg", "sem"):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                ids = [int(row.split()[1]) for row in f.read().splitlines()[1:] if row.strip()]
        except (OSError, ValueError, IndexError):
            continue
        for ident in ids:
            if kind == "sem":
                gone = libc.semctl(ident, 0, IPC_RMID) == 0
            else:
                gone = getattr(libc, f"{kind}ctl")(ident, IPC_RMID, None) == 0
            clean = clean and gone
    return clean


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def landlock_abi():
    """Landlock's ABI version here, 0 where the kernel has none."""
    try:
        return max(0, _libc().syscall(LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                                      ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION)))
    except (OSError, AttributeError):
        return 0


def _hide(paths):
    """Make `paths` (the other sides' checkouts of a shared bench server) unreadable to this process
    and everything it starts, for good: a Landlock ruleset that lets it read every folder of the
    sandbox but those. The rules follow files, not names, so /proc/N/root or a symlink does not
    get around them. False if it could not be done (the child must then not run)."""
    libc = _libc()
    ruleset = libc.syscall(LANDLOCK_CREATE_RULESET, struct.pack("=Q", READ_ANY), ctypes.c_size_t(8),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        return False
    hidden = [os.path.realpath(p) for p in paths]

    def allow(path):
        if path in hidden:
            return True
        if any(h.startswith(path.rstrip("/") + "/") for h in hidden):  # above a hidden one: allow beside it
            return all(allow(entry.path) for entry in os.scandir(path) if not entry.is_symlink())
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return True  # gone meanwhile: nothing to read
        try:
            access = READ_ANY if os.path.isdir(path) else READ_FILE
            rule = struct.pack("=Qi", access, fd)
            return libc.syscall(LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, rule, 0) == 0
        finally:
            os.close(fd)

    try:
        return (allow("/") and libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
                and libc.syscall(LANDLOCK_RESTRICT_SELF, ruleset, 0) == 0)
    finally:
        os.close(ruleset)


def _run_script(script, argv):
    """As `python script.py` does it: argv[0] as given, __file__ and sys.path[0] absolute."""
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(script)
    main = types.ModuleType("__main__")
    main.__file__, main.__cached__, main.__builtins__ = script, None, builtins
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", script)
    sys.modules["__main__"] = main
    with open(script, "rb") as f:
        code = compile(f.read(), script, "exec")
    exec(code, main.__dict__)


def _installed_imports(before, own):
    """The modules this process imported since the fork (`before`) that the interpreter's installation
    holds (its stdlib and site-packages), in import order: what a server may import once for every
    later child. Never a module of a package any of whose modules came from elsewhere (the checkout,
    a folder of `own`, a stub on sys.path), so a preload cannot stand in for the code under test."""
    prefixes = {os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                       sys.base_exec_prefix)}
    own = [os.path.realpath(p) + os.sep for p in own]
    found, foreign = [], set()
    for name, module in list(sys.modules.items()):
        if name in before or name == "__main__":
            continue
        file = getattr(module, "__file__", None)
        where = os.path.realpath(file) if isinstance(file, str) else None
        if where is None or not any(where.startswith(p) for p in prefixes) or any(where.startswith(o) for o in own):
            if where is not None or getattr(module, "__path__", None) is not None:
                foreign.add(name.partition(".")[0])
            continue
        found.append(name)
    return [n for n in found if n.partition(".")[0] not in foreign]


def _learn(names):
    """Import `names` here, in their order, for every later child; (how many were imported, whether
    that started a thread: forking a process with threads hands a child locks no one will release)."""
    threads, had = len(os.listdir("/proc/self/task")), len(sys.modules)
    for name in names:
        if isinstance(name, str) and name not in sys.modules:
            try:
                __import__(name)
            except BaseException:
                pass
    return len(sys.modules) - had, len(os.listdir("/proc/self/task")) > threads


def _settle():
    """What the server has imported stays the server's in every child: its objects out of the cycle
    collector's sight (with torch's 170,000 of them tracked, a child's full collection took 230 ms,
    writing to every page it walked), and the finalizers its imports registered to run at exit not run
    at each child's (torch's 134 operator libraries took 50 ms of every child). A child's own objects
    and finalizers are as in any process."""
    gc.freeze()
    for f in list(getattr(weakref.finalize, "_registry", ())):
        f.atexit = False


def _child(req, write_fd, control, learn_fd=None):
    secret = req.pop("key", None)  # for the check hook only: gone from the request before any code under test
    os.setsid()
    os.dup2(write_fd, 1)
    os.dup2(write_fd, 2)
    os.close(write_fd)
    for fd in control:
        os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    before = set(sys.modules) if learn_fd is not None else None
    if req.get("hide") and not _hide(req["hide"]):
        sys.stderr.write("perfagent: the other sides' checkouts could not be hidden (Landlock); not run\n")
        os._exit(125)
    if req.get("cwd"):
        os.chdir(req["cwd"])
    for key, value in req.get("env", {}).items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    code = 0
    try:
        hook = sys.modules.get("sitecustomize")
        if hook is not None and hasattr(hook, "perfagent_start"):
            hook.perfagent_start(secret)  # poison / coverage, as the request's environment asks
        secret = None
        argv = req["argv"]
        sys.path[1:1] = req.get("path", [])
        if req.get("module"):
            sys.argv = [argv[0], *argv[1:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
        else:
            _run_script(os.path.abspath(argv[0]), argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            sys.stderr.write(f"{e.code}\n")
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        import atexit

        atexit._run_exitfuncs()  # coverage saves its data at exit; os._exit would skip it
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    if learn_fd is not None:
        try:
            own = [req.get("cwd") or os.getcwd(), *req.get("path", []), *os.environ.get("PYTHONPATH", "").split(":")]
            os.write(learn_fd, json.dumps(_installed_imports(before, [o for o in own if o])).encode())
        except BaseException:
            pass
    os._exit(code & 0xFF)


def _collect(pid, read_fd, timeout_s, limit, start=None):
    """Drain the child's output (head and tail kept) until it ends or the deadline passes.

    Also what the harness sees of it from outside: `cpu_s`, the CPU time the kernel charged it and
    the processes it reaped (`os.wait4`), and `wall_s`, from `start` (the fork) to its exit, or to
    its last output if something it left wrote later (a metric printed by an orphan after the
    child exited is inside the time). Draining what it wrote before it exited is not: the bytes
    waiting in the pipe at its exit are read without moving the end. A pidfd says when it exits.
    """
    head, tail, total = bytearray(), bytearray(), 0
    half = max(1, limit // 2)
    start = time.monotonic() if start is None else start
    deadline = start + timeout_s
    status, timed_out, ended_at, usage, late_output = None, False, None, None, start
    orphans = 0.0  # the CPU time of what the child left and we reaped meanwhile
    waiting = 0  # bytes in the pipe when the child exited: its own output, not an orphan's
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None

    def reap(flags):
        nonlocal status, ended_at, usage, waiting
        done, st, ru = os.wait4(pid, flags)
        if done:
            status, ended_at, usage = st, time.monotonic(), ru
            try:
                waiting = struct.unpack("i", fcntl.ioctl(read_fd, termios.FIONREAD, b"\0" * 4))[0]
            except OSError:
                waiting = 0

    while True:
        orphans += _reap_orphans(pid if status is None else None)
        if status is None:
            reap(os.WNOHANG)
        now = time.monotonic()
        if status is None and now > deadline:
            timed_out = True
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            reap(0)
            ended_at = now
        # after the exit, half a second for late output, in steps short enough to reap what it left
        wait = 0.05 if status is None else min(0.05, max(0.0, ended_at + 0.5 - now))
        watched = [read_fd] if status is not None or pidfd is None else [read_fd, pidfd]
        ready, _, _ = select.select(watched, [], [], wait)
        if read_fd not in ready:
            if status is not None and not ready and time.monotonic() >= ended_at + 0.5:
                break
            continue
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            if status is None:
                reap(0)
            break
        if status is not None:
            waiting -= len(chunk)
            if waiting < 0:  # written after the child exited
                late_output = time.monotonic()
        total += len(chunk)
        room = max(0, half - len(head))
        head += chunk[:room]
        tail += chunk[room:]
        if len(tail) > 4 * half:
            del tail[:-half]
    if pidfd is not None:
        os.close(pidfd)
    os.close(read_fd)
    tail = bytes(tail[-half:])
    cut = max(0, total - len(head) - len(tail))
    text = head.decode("utf-8", "replace")
    if cut:
        text += f"\n[... {cut} bytes of output cut ...]\n"
    text += tail.decode("utf-8", "replace")
    if os.WIFEXITED(status):
        code = os.WEXITSTATUS(status)
    else:
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else 1
    return {"exit": code, "output": text, "timed_out": timed_out, "cut": cut,
            "wall_s": max(ended_at, late_output) - start, "cpu_s": _cpu(usage) + orphans if usage is not None else None}


def main():
    # The control pipes come at the fds PERFAGENT_CONTROL names (stdin and stdout are /dev/null):
    # bwrap's init closes those, so this process, non-dumpable below, is the sandbox's only holder.
    control_in, control_out = (int(fd) for fd in os.environ.pop("PERFAGENT_CONTROL").split(","))
    for fd in (control_in, control_out):
        os.set_inheritable(fd, False)
    loaded = []
    for name in filter(None, os.environ.get("PERFAGENT_PRELOAD", "").split(",")):
        try:
            __import__(name)
            loaded.append(name)
        except BaseException:
            pass
    _settle()
    try:
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    try:  # what a child leaves running is reparented to us, so `_sweep` reaps it and counts its CPU
        subreaper = ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        subreaper = False
    keep = _ancestors()
    wipe = [w for w in os.environ.get("PERFAGENT_WIPE", "").split(os.pathsep) if w]
    dev = _dev_entries()
    if wipe:  # POSIX message queues cannot be listed to remove them: allow none
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))
    reader = os.fdopen(control_in, "rb")
    writer = os.fdopen(control_out, "wb")

    def reply(obj):
        writer.write(json.dumps(obj).encode() + b"\n")
        writer.flush()

    held = _holders((control_in, control_out))
    if held:  # bwrap's init did not close them: a child could answer for us, so serve nothing
        reply({"ready": False, "error": f"the control pipes are held by {', '.join(held)}"})
        return
    reply({"ready": True, "preloaded": loaded, "python": sys.version.split()[0], "landlock": landlock_abi()})
    for line in reader:
        req = json.loads(line)
        read_fd, write_fd = os.pipe()
        # `learn`: this child's code is trusted (the task's own, unchanged), and what it imports of the
        # installation is imported here after it, so later children start without that work
        learn_fd = os.memfd_create("perfagent-learn") if req.get("learn") else None
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            _child(req, write_fd, (control_in, control_out), learn_fd)
        os.close(write_fd)
        result = _collect(pid, read_fd, float(req.get("timeout_s", 600)), int(req.get("max_output", 30000)), start)
        result["duration_s"] = time.monotonic() - start
        left, stayed = _sweep(keep)
        if stayed:  # never a result as if nothing were left: the host makes it an error (agent.env.warm)
            result["escaped"] = (f"{len(stayed)} processes the command started could not be ended: the warm "
                                 f"server's sweep did not empty its sandbox in {SWEEP_S}s")
        if result["cpu_s"] is not None:  # without a subreaper an orphan's CPU time is no one's to count
            result["cpu_s"] = result["cpu_s"] + left if subreaper else None
        if wipe:
            result["clean"] = all([*(_wipe(w)[0] for w in wipe), _restore_dev(dev), _remove_sysv_ipc()])
        threaded = False
        if learn_fd is not None:
            try:
                names = json.loads(os.pread(learn_fd, 4 << 20, 0) or b"[]")
            except (OSError, ValueError):
                names = []
            os.close(learn_fd)
            result["learned"], threaded = _learn(names if isinstance(names, list) else [])
            result["threaded"] = threaded
            _settle()
        reply(result)
        if threaded:  # no child may be forked from here any more: the host sees the server end
            return


if __name__ == "__main__":
    main()
