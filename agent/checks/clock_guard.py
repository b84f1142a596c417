"""perfagent clock guard, copied beside the check hook (as `_c<hex>.py`) and started by it in every bench
process (PERFAGENT_CLOCKS=1): the timing functions a bench reads are the interpreter's own.

The hook calls `start` before any code under test runs; it keeps the originals (`time.perf_counter`,
`perf_counter_ns`, `monotonic`, `monotonic_ns`, `time`, `time_ns`, `process_time`, and once torch is
imported `torch.cuda.Event.elapsed_time` / `torch.cuda.synchronize` and the C calls under them) and
what each built-in's object and method table hold in memory. It checks, by identity and by those
bytes, so the spelling of a replacement does not matter (setattr, `time.__dict__` writes,
`sys.modules['time']` swapped, a module of the code under test whose `time` / `perf_counter` global
was rebound, a `__code__` swap, ctypes writes into the dict or the function object):
- every few milliseconds from a thread of its own (a fake put back before the process ends is
  still seen while it was in place), and
- at the end: at exit, and in `os._exit`.
It writes two signed rows (the hook's key) to a private duplicate of stderr: `start` as it begins and
`end` with every replacement it ever saw, so a process that drops a row or never reaches the end
leaves no `end` row, which the harness reads as "not checked", never as clean.
Limits: a fake put in place for less than the sampler's period and put back before the end can go
unseen, and only the bench process itself reports (not the processes it forks). Stdlib only (it runs
in the target's interpreter, CPython 3.9+).
"""

import os
import struct
import sys

NAMES = ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns", "process_time")
EVERY_S = 0.005  # the sampler's identity checks (a few microseconds each)
SCAN_EVERY = 20  # and every 20th also the code under test's module globals
_PTR = struct.calcsize("P")


def _where(obj):
    """What replaced a timing function, and where it was made: module.name (file:line)."""
    code = getattr(obj, "__code__", None) or getattr(getattr(obj, "__call__", None), "__code__", None)
    func = getattr(obj, "func", None)  # functools.partial
    if code is None and func is not None:
        return "partial of " + _where(func)
    name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    module = getattr(obj, "__module__", None) or type(obj).__module__
    if isinstance(obj, type(sys)):
        inner = [(n, getattr(obj, n)) for n in NAMES[:1] if callable(getattr(obj, n, None))]
        return "module %s (%s)%s" % (obj.__name__, getattr(obj, "__file__", None) or "made at run time",
                                     "".join(", its %s: %s" % (n, _where(f)) for n, f in inner))
    if code is not None:
        return "%s.%s (%s:%d)" % (module, name, code.co_filename, code.co_firstlineno)
    return "%s.%s (%s)" % (module, name, repr(obj)[:80])


def _memory():
    """pread on /proc/self/mem: the bytes of an object, without ctypes (reopened after a fork)."""
    state = {"pid": None, "fd": None}

    def read(addr, n):
        if state["pid"] != os.getpid():
            state["pid"] = os.getpid()
            try:
                state["fd"] = os.open("/proc/self/mem", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                state["fd"] = None
        try:
            return os.pread(state["fd"], n, addr) if state["fd"] is not None else None
        except (OSError, OverflowError):
            return None

    return read


def _fingerprint(f, read):
    """A built-in's method-table pointer, self, module and vectorcall slot, and its table entry's name,
    C function and flags (CPython's PyCFunctionObject and PyMethodDef); a Python function's code."""
    code = getattr(f, "__code__", None)
    if code is not None:
        return code
    if type(f).__name__ != "builtin_function_or_method" or type(f).__basicsize__ != 7 * _PTR:
        return None
    obj = read(id(f) + 2 * _PTR, 5 * _PTR)
    if obj is None or len(obj) != 5 * _PTR:
        return None
    table = read(struct.unpack("P", obj[:_PTR])[0], 3 * _PTR)
    return (obj[:3 * _PTR] + obj[4 * _PTR:], table)


def start(sign, after_import, root=None):
    """Keep the originals and start checking; `sign` is the hook's row signer (never None here)."""
    import _thread
    import atexit
    import time

    read = _memory()
    root = os.path.join(os.path.abspath(root or os.getcwd()), "")
    clock = time
    space = clock.__dict__
    watched = [("time." + n, space, n, space[n]) for n in NAMES if n in space]
    kept = {label: _fingerprint(f, read) for label, _, _, f in watched}
    seen = []  # every replacement found, in the order found
    out = os.dup(2)
    os.set_inheritable(out, False)
    state = {"pid": os.getpid(), "ended": False, "memory": all(v is not None for v in kept.values())}

    def write(row):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        try:
            os.write(out, ("\n" + sign(row) + "\n").encode("utf-8", "surrogateescape"))
        except OSError:
            pass

    def found(what):
        if what not in seen:
            seen.append(what)

    for label, _, _, f in watched:  # replaced before this hook ran (a .pth file, a sitecustomize it chains)
        if type(f).__name__ != "builtin_function_or_method" or getattr(f, "__self__", None) is not clock:
            found("%s was already %s when the process started" % (label, _where(f)))

    def on_torch(torch):
        cuda = getattr(torch, "cuda", None)
        event = getattr(cuda, "Event", None)
        base = getattr(getattr(torch, "_C", None), "_CudaEventBase", None)
        more = [("torch.cuda.Event", cuda.__dict__, "Event", event) if event is not None else None,
                ("torch.cuda.synchronize", cuda.__dict__, "synchronize", cuda.__dict__.get("synchronize"))
                if cuda is not None else None,
                ("torch._C._cuda_synchronize", torch._C.__dict__, "_cuda_synchronize",
                 torch._C.__dict__.get("_cuda_synchronize")),
                ("torch.cuda.Event.elapsed_time", event.__dict__, "elapsed_time", event.__dict__.get("elapsed_time"))
                if event is not None else None,
                ("torch.cuda.Event.synchronize", event.__dict__, "synchronize", event.__dict__.get("synchronize"))
                if event is not None else None,
                ("torch._C._CudaEventBase.elapsed_time", base.__dict__, "elapsed_time",
                 base.__dict__.get("elapsed_time")) if base is not None else None]
        for item in more:
            if item is not None and item[3] is not None:
                watched.append(item)
                kept[item[0]] = _fingerprint(item[3], read)

    installed = tuple(os.path.join(os.path.abspath(p), "") for p in {sys.prefix, sys.exec_prefix, sys.base_prefix})

    def _own(path):
        """A file of the checkout, not of an interpreter or environment kept inside it (a .venv)."""
        path = os.path.abspath(path)
        return (path.startswith(root) and not path.startswith(installed)
                and "/site-packages/" not in path and "/dist-packages/" not in path)

    own = {}  # module name -> (module, whether its file is the code under test's)
    known = {"n": -1, "names": []}

    def own_modules():
        """The modules of the code under test: files under the bench's folder, and __main__ (looked
        over again only when sys.modules changed size)."""
        if len(sys.modules) != known["n"]:
            known["n"], names = len(sys.modules), []
            for name, module in list(sys.modules.items()):
                entry = own.get(name)
                if entry is None or entry[0] is not module:
                    path = getattr(module, "__file__", None)
                    entry = own[name] = (module, name == "__main__" or (isinstance(path, str) and _own(path)))
                if entry[1]:
                    names.append(name)
            known["names"] = names
        for name in known["names"]:
            module = sys.modules.get(name)
            if module is not None:
                yield name, getattr(module, "__dict__", {})

    def check(deep, scan=True):
        if sys.modules.get("time") is not clock:
            found("sys.modules['time'] is %s" % _where(sys.modules.get("time")))
        for label, names, name, original in list(watched):
            now = names.get(name)
            if now is not original:
                found("%s replaced by %s" % (label, _where(now)))
            elif deep or getattr(original, "__code__", None) is not None:
                if _fingerprint(original, read) != kept[label]:
                    found("%s rewritten in place (its code or C function changed)" % label)
        for module, g in own_modules() if scan else ():
            for n in NAMES:
                value = g.get(n)
                if value is None or value is clock or value is space.get(n) or isinstance(value, type):
                    continue
                if n == "time" and any(hasattr(value, m) for m in NAMES):  # a module-like stand-in for time
                    for m in NAMES:
                        inner = getattr(value, m, None)
                        if inner is not None and inner is not space.get(m):
                            found("%s.time.%s replaced by %s" % (module, m, _where(inner)))
                elif callable(value) and getattr(value, "__module__", None) != module:
                    found("%s.%s replaced by %s" % (module, n, _where(value)))

    def end():
        if state["ended"] or state["pid"] != os.getpid():
            return
        state["ended"] = True
        try:
            check(True)
        except Exception as e:
            found("the end check failed: %r" % (e,))
        write("#clocks\tend\t%d\t%s" % (os.getpid(), "\x1f".join(seen)))

    sleep = time.sleep  # the one found at start: a replaced sleep is not what paces the sampler

    def sampler():
        tick = 0
        while not state["ended"] and state["pid"] == os.getpid():
            sleep(EVERY_S)
            tick += 1
            try:
                check(False, scan=tick % SCAN_EVERY == 0)  # the modules' globals: ~0.5 ms while imports go on
            except Exception:
                pass

    exit_now = os._exit

    def _exit(code):
        end()
        exit_now(code)

    write("#clocks\tstart\t%d\t%s" % (os.getpid(), "memory" if state["memory"] else "identity"))
    after_import("torch", on_torch)
    os._exit = _exit
    atexit.register(end)
    _thread.start_new_thread(sampler, ())
    return check
