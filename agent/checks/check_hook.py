"""perfagent check hook, copied as `sitecustomize.py` into a folder put first on PYTHONPATH.

Every Python process a check command starts runs this at start-up:
- PERFAGENT_POISON=1: as soon as torch is imported, turn on deterministic algorithms and
  fill uninitialised memory (NaN for floats, max int for ints), so a buffer read before
  it is written fails the tests; `numpy.empty`/`empty_like` and `torch.UntypedStorage(n)`,
  which torch's switch does not reach, are filled too. torch is not imported eagerly:
  processes that never use it pay nothing.
- PERFAGENT_SANITIZE=<folder>: once torch is imported (after poisoning), start the
  uninitialised-read sanitizer copied beside this file (perfagent_sanitize.py).
- PERFAGENT_CLOCKS=1 (bench processes that got a key): before anything else, start the clock
  guard copied beside this file (`_c<hex>.py`, agent/checks/clock_guard.py).
- PERFAGENT_LINES=<folder>: record which lines of the files listed in <folder>/targets.json
  run, each line once per process, appended to a file of its own in <folder> as it happens (so a
  process that dies still leaves what it ran). No package is needed: `sys.monitoring` on 3.12+,
  a tracer that looks only into those files' frames on 3.9-3.11, switched on as the first of them
  is imported or loaded by path (`spec_from_file_location` and `exec_module`).
Then the sitecustomize this file shadows, if any, still runs. A warm interpreter
(agent/env/zygote.py) imports this once and calls `perfagent_start` in each forked child.

Records are signed: every row carries an HMAC under a key the harness hands this process, out of
the environment's reach (a warm child gets it in its request; a cold one reads it from the file
descriptor PERFAGENT_KEY_FD names, which is closed before any code under test runs). Rows without
a valid tag do not count, so code under test cannot claim a line ran by writing a row of its own.
A process that got no key (one the tests started themselves) records nothing and says so.
"""

import hashlib
import hmac
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


_lines = {"pid": None}


def _signer(key):
    """row -> row + TAB + its tag; None without a key. The key lives only in this closure."""
    if not key:
        return None
    secret = key.encode() if isinstance(key, str) else key

    def sign(row):
        return "%s\t%s" % (row, hmac.new(secret, row.encode("utf-8", "surrogateescape"),
                                          hashlib.sha256).hexdigest()[:32])

    return sign


def _inherited_key():
    """The key from the descriptor PERFAGENT_KEY_FD names, once: the descriptor is closed and the
    variable removed, so neither code under test nor the processes it starts find it there."""
    fd = os.environ.pop("PERFAGENT_KEY_FD", None)
    if not fd or not fd.isdigit():
        return None
    try:
        key = os.pread(int(fd), 128, 0).decode().strip()
    except (OSError, UnicodeDecodeError):
        key = None
    try:
        os.close(int(fd))
    except OSError:
        pass
    return key or None


def _start_lines(sign):
    folder = os.environ.get("PERFAGENT_LINES")
    if not folder or _lines["pid"] == os.getpid():
        return
    _lines["pid"] = os.getpid()
    try:
        import json

        with open(os.path.join(folder, "targets.json")) as f:
            targets = frozenset(json.load(f))
        try:  # the changed lines that need every instruction's position (agent.checks.arms)
            with open(os.path.join(folder, "fine.json")) as f:
                fine = {k: frozenset(v) for k, v in json.load(f).items()}
        except FileNotFoundError:
            fine = {}
        out = open(os.path.join(folder, "lines.%d.%s" % (os.getpid(), os.urandom(4).hex())), "a", buffering=1)
        if sign is None:
            out.write("#nokey\n")
            return
        out.write(sign("#started python %d.%d" % sys.version_info[:2]) + "\n")
    except Exception as e:  # the run goes on; no file means "not measured", and the harness says why
        sys.stderr.write("perfagent: changed-line recording not started: %r\n" % (e,))
        return

    def wanted(filename):
        """The file's normal absolute name if it is recorded ("./x.py" and "a/./x.py" come from
        relative sys.path entries)."""
        filename = os.path.abspath(filename)
        return filename if filename in targets else None

    rows = set()

    def emit(row):
        if row not in rows:
            rows.add(row)
            out.write(sign(row) + "\n")

    def fine_code(code, name):
        """(name, fine lines, positions, conditional jumps) for a code object with fine lines; None."""
        lines = fine.get(name)
        if not lines or not any(n in lines for _, _, n in code.co_lines()):
            return None
        positions = list(code.co_positions())
        jumps = frozenset()
        if not hasattr(sys, "monitoring"):
            import dis

            jumps = frozenset(i.offset for i in dis.get_instructions(code)
                              if "IF" in i.opname and "JUMP" in i.opname and positions[i.offset // 2][0] in lines)
        return name, lines, positions, jumps

    def at(f, offset):
        p = f[2][offset // 2] if offset // 2 < len(f[2]) else None
        return (p[0], p[2], p[1], p[3]) if p is not None and None not in p else (-1, -1, -1, -1)  # line, col, end

    def ran(f, offset):
        p = at(f, offset)
        if p[0] in f[1]:
            emit("@p\t%s\t%d\t%d\t%d\t%d" % ((f[0],) + p))

    def jumped(f, src, dst):
        emit("@e\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d" % ((f[0],) + at(f, src) + at(f, dst)))

    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None:
        tool = next((t for t in (monitoring.COVERAGE_ID, 4, 3, 5) if monitoring.get_tool(t) is None), None)
        if tool is None:
            out.write(sign("#error no free sys.monitoring tool id") + "\n")
            return
        monitoring.use_tool_id(tool, "perfagent")

        events, DISABLE = monitoring.events, monitoring.DISABLE
        split = hasattr(events, "BRANCH_LEFT")  # 3.14: each direction of a branch disabled on its own
        branches = events.BRANCH_LEFT | events.BRANCH_RIGHT if split else events.BRANCH
        fines, dests = {}, {}

        def on_start(code, offset):
            """A recorded file's code object, as it first starts: its lines (and, with fine lines on it,
            its instructions and branches) are watched; any other code is never seen again."""
            name = wanted(code.co_filename)
            if name:
                f = fines[code] = fine_code(code, name)
                monitoring.set_local_events(tool, code, events.LINE | (events.INSTRUCTION | branches if f else 0))
            return DISABLE

        def on_line(code, line):
            out.write(sign("%s\t%d" % (wanted(code.co_filename), line)) + "\n")
            return DISABLE  # each line is reported once, then costs nothing

        def on_instruction(code, offset):
            ran(fines[code], offset)
            return DISABLE

        def on_branch(code, src, dst):
            f = fines[code]
            if at(f, src)[0] not in f[1]:
                return DISABLE
            jumped(f, src, dst)
            if split:
                return DISABLE
            # 3.12-3.13 disable both directions at once: a branch stays watched until both were seen
            seen = dests.setdefault((code, src), set())
            seen.add(dst)
            return DISABLE if len(seen) > 1 else None

        monitoring.register_callback(tool, events.PY_START, on_start)
        monitoring.register_callback(tool, events.LINE, on_line)
        monitoring.register_callback(tool, events.INSTRUCTION, on_instruction)
        for event in ((events.BRANCH_LEFT, events.BRANCH_RIGHT) if split else (events.BRANCH,)):
            monitoring.register_callback(tool, event, on_branch)
        monitoring.set_events(tool, events.PY_START)
        return

    import threading

    seen = set()
    verdicts = {}
    fines, pending, done = {}, {}, set()
    columns = sys.version_info >= (3, 11)  # co_positions

    def local(frame, event, arg):
        if event == "line":
            key = (verdicts[frame.f_code], frame.f_lineno)
            if key not in seen:
                seen.add(key)
                out.write(sign("%s\t%d" % key) + "\n")
        elif event == "opcode":  # only in frames of code with fine lines (3.11)
            code, offset = frame.f_code, frame.f_lasti
            src = pending.pop(frame, None)
            if src is not None and (code, src, offset) not in done:
                done.add((code, src, offset))
                jumped(fines[code], src, offset)
            if (code, offset) not in done:
                done.add((code, offset))
                ran(fines[code], offset)
            if offset in fines[code][3]:
                pending[frame] = offset
        return local

    verdict = verdicts.get

    def on_call(frame, event, arg):
        # called on every Python call of the process once tracing is on: the common case (code of no
        # recorded file) is one lookup, which halves what the tracer adds to a run (SGLang's tests: 4 s)
        code = frame.f_code
        name = verdict(code, False)
        if name is None:
            return None
        if name is False:
            name = verdicts[code] = wanted(code.co_filename)
            if name is None:
                return None
            if fine.get(name):
                if columns:
                    fines[code] = fine_code(code, name)
                else:  # no column positions: which statements and arms of a fine line ran is not known
                    emit("#coarse\t%s" % name)
        if fines.get(code) is not None:
            frame.f_trace_opcodes = True
        return local

    # A tracer costs a Python call per Python call, and importing a big package (sglang: 6 s) is
    # mostly calls: it is switched on only as the first changed module is imported.
    stems = {os.path.splitext(os.path.basename(t))[0] for t in targets}
    stems |= {os.path.basename(os.path.dirname(t)) for t in targets if t.endswith("__init__.py")}
    state = {"on": False}

    def activate():
        if not state["on"]:
            state["on"] = True
            sys.settrace(on_call)
            threading.settrace(on_call)

    loader = importlib.machinery.SourceFileLoader
    run_source = loader.exec_module

    def exec_module(self, module):
        if not state["on"] and wanted(self.path):
            activate()  # a changed file loaded by path (spec_from_file_location, a loader of its own)
        return run_source(self, module)

    loader.exec_module = exec_module

    class OnChangedImport(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if state["on"] or name.rpartition(".")[2] not in stems:
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None and spec.origin and wanted(spec.origin):
                activate()  # found is as good as run: an import or `python -m` (runpy) follows
            return None  # the usual finders go on to find it: this one only watches

    def missed():
        """A changed file that ran before the tracer was on (a script run as __main__, source exec'd
        into a module by hand): its lines are not measured in this process, and the harness must not
        call them unexecuted."""
        if state["on"]:
            return
        for module in list(sys.modules.values()):
            name = getattr(module, "__file__", None)
            if name and wanted(name):
                out.write(sign("#error %s ran outside the import system, before line recording could start"
                               % os.path.basename(name)) + "\n")
                return

    import atexit

    atexit.register(missed)
    sys.meta_path.insert(0, OnChangedImport())


def _poison(torch):
    # torch's switch itself: use_deterministic_algorithms() also imports torch._inductor.config to set
    # a compiler flag that fills no memory, 1.4 s of every poisoned process on torch 2.13
    switch = getattr(torch._C, "_set_deterministic_algorithms", None)
    if switch is not None:
        switch(True, warn_only=True)
    else:
        torch.use_deterministic_algorithms(True, warn_only=True)
    import torch.utils.deterministic

    torch.utils.deterministic.fill_uninitialized_memory = True
    _poison_storages(torch)
    after_import("numpy", _poison_numpy)


def _poison_storages(torch):
    """`torch.UntypedStorage(n)` allocates without aten's allocator, so torch's switch leaves it as the
    heap had it: filled here (0xff bytes: NaN for floats, -1 or max for ints)."""
    storage_type = torch.UntypedStorage
    new = storage_type.__new__

    def created(cls, *args, **kwargs):
        storage = new(cls, *args, **kwargs)
        if len(args) == 1 and type(args[0]) is int and args[0] > 0 and not kwargs.keys() - {"device"}:
            storage.fill_(255)
        return storage

    storage_type.__new__ = staticmethod(created)


def _poison_numpy(np):
    """numpy.empty and empty_like hand out the heap as it was (zero pages at large sizes): filled like
    torch's (NaN, max int, True), so a tensor made from them meets poison too."""
    def poisoning(original):
        def allocate(*args, **kwargs):
            a = original(*args, **kwargs)
            kind = getattr(getattr(a, "dtype", None), "kind", "")
            try:
                if kind in "fc" and kind:
                    a.fill(float("nan"))
                elif kind in ("i", "u"):
                    a.fill(np.iinfo(a.dtype).max)
                elif kind == "b":
                    a.fill(True)
            except (TypeError, ValueError):
                pass
            return a

        allocate.__wrapped__ = original
        return allocate

    for name in ("empty", "empty_like"):
        if hasattr(np, name):
            setattr(np, name, poisoning(getattr(np, name)))


def _on_torch(torch, sign):
    if os.environ.get("PERFAGENT_POISON") == "1":
        _poison(torch)
    folder = os.environ.get("PERFAGENT_SANITIZE")
    if folder:
        try:
            if sign is None:
                with open(os.path.join(folder, "reads.%d.nokey" % os.getpid()), "a") as f:
                    f.write("#nokey\n")
                return
            sanitize = _sanitizer_module()
            sanitize.start(folder, after_import, sign)
        except Exception as e:  # recorded as "not measured" by the harness, with this reason
            try:
                with open(os.path.join(folder, "reads.%d.error" % os.getpid()), "a") as f:
                    f.write("#error sanitizer not started: %r\n" % (e,))
            except OSError:
                sys.stderr.write("perfagent: sanitizer not started: %r\n" % (e,))


def after_import(module_name, then):
    """Run `then(module)` right after `module_name` is imported (now, if it already is): a finder that
    finds nothing itself but wraps the module's loader."""
    if module_name in sys.modules:
        then(sys.modules[module_name])
        return

    class Watch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name != module_name:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None:
                return spec
            exec_module = spec.loader.exec_module

            def exec_then(module):
                exec_module(module)
                then(module)

            spec.loader.exec_module = exec_then
            return spec

    sys.meta_path.insert(0, Watch())


def _chain():
    """Run the next sitecustomize on sys.path (the one this file hides)."""
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None and spec.origin != os.path.abspath(__file__):
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


def _sanitizer_module():
    """The sanitizer copied beside this file under a name of its own (agent.checks.correctness.install_hook),
    loaded by path: no name in sys.modules leads to it."""
    name = next(n for n in os.listdir(_HERE) if n.startswith("_s") and n.endswith(".py"))
    spec = importlib.util.spec_from_file_location(name[:-3], os.path.join(_HERE, name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _guard_clocks(sign):
    """The clock guard copied beside this file as `_c<hex>.py` (agent.checks.clocks.install), loaded by
    path; one that cannot start writes no row, which the harness reads as "not checked"."""
    try:
        name = next(n for n in os.listdir(_HERE) if n.startswith("_c") and n.endswith(".py"))
        spec = importlib.util.spec_from_file_location(name[:-3], os.path.join(_HERE, name))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.start(sign, after_import)
    except Exception as e:
        sys.stderr.write("perfagent: clock guard not started: %r\n" % (e,))


def perfagent_start(key=None):
    """What the environment asks for; a warm interpreter calls it again in each forked child, with
    that child's key."""
    sign = _signer(key or _inherited_key())
    if os.environ.get("PERFAGENT_CLOCKS") == "1" and sign is not None:
        _guard_clocks(sign)  # first: the timing functions as the interpreter made them
    _start_lines(sign)
    if os.environ.get("PERFAGENT_POISON") == "1" or os.environ.get("PERFAGENT_SANITIZE"):
        after_import("torch", lambda torch: _on_torch(torch, sign))


perfagent_start()
_chain()
