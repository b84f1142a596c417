"""perfagent's uninitialised-read sanitizer, copied beside the check hook as `perfagent_sanitize.py`
and started by it (in the poisoned test run) when PERFAGENT_SANITIZE=<folder> is set.

Poisoned memory fails a test only when the garbage reaches an assertion; this records the read
itself. Every tensor allocated uninitialised (`torch.empty`, `empty_like`, `new_empty`,
`empty_strided`, ...) from a line of the files in <folder>/config.json's "targets" gets a shadow
mask of its storage's initialised elements. A TorchDispatchMode sees every op: arguments the op
reads are checked against the mask, arguments it writes (per the op's schema) are marked. Ops
outside aten, and the functions named in "kernels" (opaque kernels), count every tensor argument
as read. Each read of uninitialised elements is appended as a JSON line to a file of this
process's own in <folder>: which buffer (allocation site), which op and argument, how many
elements, where it was called from, and which test was running (PERFAGENT_TEST, or pytest's
PYTEST_CURRENT_TEST). A buffer allocated on a line in "heal" (a quick check's changed lines) is then
zero-filled, as the `torch.zeros` it replaced was, so the run goes on to its next reads. Runs in the
target's interpreter: standard library and torch only.

Memory that reaches a tensor from outside aten is tracked too (`_HostSources`): `numpy.empty` and
`empty_like` called from a target line fill their array with a pattern of their own (a NaN with
perfagent's payload, max int, True), and `torch.from_numpy`, `as_tensor`, `asarray`, `tensor` and
`frombuffer` of such an array give the tensor a shadow whose unwritten elements are those still
holding the pattern (numpy's own writes are not seen: the values say what they wrote, so a value a
program writes equal to the pattern counts as unwritten, as it would under poison).
`torch.UntypedStorage(n)` called from a target line, and `resize_`/`set_` growing a storage there,
are unwritten as aten's allocators are. Memory none of this can see (a ctypes object that does not
own zeroed memory, an extension's own allocation, an array made over a foreign pointer) is named in
an "unwatched" row for the line that wraps it in a tensor.

Every row is signed by the check hook (`sign`), and at exit a closing row says whether the mode was
still on the dispatch stack, how many ops it saw, whether a canary (an unwritten tensor of its own,
read through an op) was caught as a read, and a digest of the rows this process wrote: a process
whose closing row is missing or does not add up measured nothing the harness can trust.
"""

import atexit
import hashlib
import json
import os
import re
import sys
import threading
import weakref

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPORTERS = re.compile(r"[/\\](_pytest|unittest|pprint|reprlib|traceback)([/\\]|\.py:)")
_ALLOCATORS = frozenset({"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided"})
# Ops that read only their inputs' metadata (shape, dtype, device), never the values; the last two are
# views the schema does not mark as such (reshape's).
_METADATA = frozenset({"detach", "alias", "lift_fresh", "lift_fresh_copy", "resize_", "set_", "is_same_size",
                       "_has_compatible_shallow_copy_type", "record_stream", "_unsafe_view", "_reshape_alias"})
# In-place ops whose written argument's old values do not matter: they overwrite all of it ...
_OVERWRITE = frozenset({"copy_", "fill_", "zero_", "normal_", "uniform_", "random_", "bernoulli_", "exponential_",
                        "geometric_", "cauchy_", "log_normal_"})
# ... or just the elements an index selects (marked by running the same indexing on the mask).
_PARTIAL = frozenset({"index_put_", "_index_put_impl_", "index_copy_", "index_fill_", "masked_fill_",
                      "masked_scatter_", "scatter_", "put_"})
# Ops that copy or permute their data arguments (_DATA) without using the values: as in MSan, the copy
# inherits which elements are unwritten, and only a later use of them is a read. Their index arguments
# are used. The same op run on the masks (data arguments replaced by their masks, written scalars by
# True) says which elements of the output are unwritten: aten's own semantics, `None` in `index`'s
# indices included (a whole dimension, where a Python subscript would read a new axis).
_MOVES = frozenset({"clone", "_to_copy", "index", "_unsafe_index", "index_select", "gather", "take",
                    "take_along_dim", "cat", "stack", "where", "constant_pad_nd", "roll", "flip", "rot90", "repeat",
                    "permute_copy", "transpose_copy", "t_copy", "expand_copy", "view_copy", "unsqueeze_copy",
                    "squeeze_copy", "select_copy", "slice_copy", "diagonal_copy", "narrow_copy", "unfold_copy",
                    "alias_copy", "as_strided_copy", "copy_", "index_put_", "_index_put_impl_", "index_copy_",
                    "scatter_", "masked_scatter_"})
_INPLACE_MOVES = frozenset({"copy_", "index_put_", "_index_put_impl_", "index_copy_", "scatter_", "masked_scatter_"})
_DATA = frozenset({"self", "src", "source", "values", "tensors", "other"})
_WRITTEN_SCALARS = _DATA | {"value"}  # a scalar an op writes (`where`'s other, a pad or scatter value)
_CANARY = "<canary>"
# Ops that can give a tensor's storage new, unwritten bytes (growth of the same storage).
_GROWS = frozenset({"resize_", "set_"})


class _Shadow:
    """Which elements of one tracked storage hold a written value (mask in the allocated dtype's units)."""

    __slots__ = ("storage", "mask", "elem", "site")

    def __init__(self, storage, mask, elem, site):
        self.storage, self.mask, self.elem, self.site = storage, mask, elem, site


_ALLOCATES, _GROWING, _PASSES, _USES = range(4)  # what an op is to the sanitizer (_Plan.kind)


class _Plan:
    """One op as the sanitizer sees it (_Sanitizer._plan)."""

    __slots__ = ("kind", "name", "label", "arguments", "written", "custom", "moves", "overwrites", "partial",
                 "accumulates")

    def __init__(self, **fields):
        for k, v in fields.items():
            setattr(self, k, v)


def start(folder, after_import, sign):
    """Install the sanitizer in this process (torch already imported); `after_import(module, then)`
    and `sign(row)` come from the check hook."""
    import torch

    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    out = open(os.path.join(folder, "reads.%d.%s" % (os.getpid(), os.urandom(4).hex())), "a", buffering=1)
    sanitizer = _Sanitizer(torch, frozenset(config["targets"]), _Rows(out, sign), frozenset(config.get("heal", ())))
    sanitizer.rows.write("#started")
    sanitizer.install(config.get("kernels", []), after_import)
    atexit.register(sanitizer.close)
    return sanitizer


class _Rows:
    """Signed rows appended to this process's file, and a digest of those this process wrote (a
    forked child appends to the same file: its rows carry its pid and do not enter the digest)."""

    def __init__(self, out, sign):
        self.out, self.sign, self.pid = out, sign, os.getpid()
        self.count, self.digest = 0, hashlib.sha256()

    def write(self, row):
        signed = self.sign(row)
        self.out.write(signed + "\n")
        if os.getpid() == self.pid:
            self.count += 1
            self.digest.update(signed.encode("utf-8", "surrogateescape") + b"\n")


def _make_mode(torch, after_import):
    """The dispatch mode's class. torch (2.13) wraps a mode's __torch_dispatch__ so that torch.compile
    never traces it: its first call imports torch._dynamo (2 s) and every op pays for the wrapper. That
    is needed only once compiled code can run, which takes torch._dynamo imported: so the wrapping comes
    then, when the process imports it."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Mode(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls):
            return False

        def __init__(self, sanitizer):
            super().__init__()
            self.sanitizer = sanitizer

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return self.sanitizer.dispatch(func, args, kwargs or {})

    def untraced(dynamo):
        Mode.__torch_dispatch__ = torch._disable_dynamo(Mode.__dict__["__torch_dispatch__"], recursive=True)

    after_import("torch._dynamo", untraced)
    return Mode


class _Sanitizer:
    def __init__(self, torch, targets, rows, heal=frozenset()):
        self.torch = torch
        self.targets = targets
        self.heal = heal  # allocation sites zero-filled after their first recorded read (sanitizer.prepare)
        self.rows = rows
        self.shadows = {}  # storage data_ptr -> _Shadow
        self.seen = set()
        self.allocated = set()  # the sites that allocated uninitialised memory here
        self.ops = 0
        self.mode = None
        self.canary = False  # the canary's read was caught
        self.plans = {}  # op -> _Plan
        # thread -> [the outermost frame in a target file, the shadows it allocated]: the call into the
        # changed code that made a buffer; when it has returned, whether it left the buffer written in full
        self.calls = {}
        # (site, n: the n-th buffer the call made there) -> [buffers, written in full when their call returned]
        self.by_return = {}
        self.is_capturing = torch.cuda.is_current_stream_capturing if torch.cuda.is_available() else None
        self.torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep

    # -- installation -----------------------------------------------------------------------
    def install(self, kernels, after_import):
        torch = self.torch
        mode = self.mode = _make_mode(torch, after_import)(self)
        mode.__enter__()  # for the life of the process; a forked child inherits nothing, it starts its own
        for method in ("tolist", "numpy", "__array__"):  # read the data without dispatching an op
            self._wrap_method(method)
        _HostSources(self).install(after_import)
        for name in kernels:
            module, _, attr = name.rpartition(".")
            after_import(module, lambda m, attr=attr, name=name: self._wrap_kernel(m, attr, name))

    def _wrap_method(self, method):
        original = getattr(self.torch.Tensor, method)

        def reading(t, *args, **kwargs):
            self.check_read(t, "Tensor." + method, None)
            return original(t, *args, **kwargs)

        setattr(self.torch.Tensor, method, reading)

    def _wrap_kernel(self, module, attr, name):
        original = getattr(module, attr, None)
        if original is None:
            self.rows.write("#error kernel %s not found" % name)
            return

        def kernel(*args, **kwargs):
            named = [("#%d" % i, a) for i, a in enumerate(args)] + list(kwargs.items())
            tensors = [(n, t) for n, a in named for t in _tensors(a, self.torch)]
            for n, t in tensors:
                self.check_read(t, "kernel " + name, n)
            result = original(*args, **kwargs)
            for _, t in tensors:
                self.mark(t)
            return result

        setattr(module, attr, kernel)

    # -- the dispatch mode ------------------------------------------------------------------
    def capturing(self):
        """Whether this thread's CUDA stream is capturing a graph. Once a device-side assert fires (an
        index read from garbage, say), every CUDA call of the process raises, this one too: such a process
        captures nothing, and its CPU ops, the closing canary's among them, must run on as without us."""
        if self.is_capturing is None:
            return False
        try:
            return self.is_capturing()
        except RuntimeError:
            return False

    def close(self):
        """The closing row: still on the dispatch stack, ops seen, the canary caught, and the digest of
        every row before it. Only the process that started the sanitizer writes one."""
        if os.getpid() != self.rows.pid:
            return
        try:
            from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

            on_stack = any(m is self.mode for m in _get_current_dispatch_mode_stack())
        except Exception:
            on_stack = False
        try:
            from torch.utils._python_dispatch import _disable_current_modes

            with _disable_current_modes():
                for tid in list(self.calls):
                    self._returned(tid)
        except Exception:
            pass
        for (site, nth), (buffers, whole) in sorted(self.by_return.items()):
            self.rows.write(json.dumps({"by_return": site, "nth": nth, "buffers": buffers, "whole": whole,
                                        "pid": os.getpid()}))
        self.canary = False
        try:
            canary = self.torch.empty(4)
            self._new_shadow(canary, _CANARY, initialised=False)
            canary.sum()  # through the mode, as any read would be
        except Exception:
            pass
        summary = {"on_stack": on_stack, "ops": self.ops, "canary": self.canary, "rows": self.rows.count,
                   "digest": self.rows.digest.hexdigest()}
        self.rows.write("#closed " + json.dumps(summary, sort_keys=True))

    def dispatch(self, func, args, kwargs):
        self.ops += 1
        if self.calls:
            self._settle_calls()
        plan = self.plans.get(func) or self._plan(func)
        if plan.kind == _ALLOCATES:
            result = func(*args, **kwargs)
            self.track(result)
            return result
        if plan.kind == _GROWING and args and isinstance(args[0], self.torch.Tensor):
            return self._growing(func, args, kwargs)
        if not self.shadows or plan.kind != _USES:
            return func(*args, **kwargs)
        if self.capturing():  # a CUDA graph capture executes nothing, and a mask check would sync
            return func(*args, **kwargs)
        if not self._touches(args) and not self._touches(kwargs.values()):  # most ops: nothing to read or mark
            return func(*args, **kwargs)
        name, written, custom = plan.name, plan.written, plan.custom
        accumulate = kwargs.get("accumulate") or (plan.accumulates and len(args) > 3 and args[3] is True)
        move = None if custom or accumulate or not plan.moves else name
        overwrites = plan.overwrites or (plan.partial and not accumulate)
        arguments = [*zip(plan.arguments, args), *kwargs.items()]
        for arg, value in arguments:
            if move is not None and arg in _DATA:
                continue  # copied, not used: the copy carries the unwritten elements along
            if custom or arg not in written or not (written[arg] or overwrites):
                for t in _tensors(value, self.torch):
                    self.check_read(t, plan.label, arg)
        result = func(*args, **kwargs)
        if move is not None:
            if not self.propagate(func, dict(arguments), result):  # a form the masks cannot follow: a use
                for arg, value in arguments:
                    if arg in _DATA and not (arg == "self" and move in _INPLACE_MOVES):
                        for t in _tensors(value, self.torch):
                            self.check_read(t, plan.label, arg)
            return result
        for arg, value in arguments:
            if arg in written or custom:
                for t in _tensors(value, self.torch):
                    if plan.partial and overwrites and not custom:
                        self.mark_partial(name, t, args)
                    else:
                        self.mark(t)
        return result

    def _touches(self, values):
        """Whether a tensor among `values` (or in a list of them) may have a shadow: the one question of
        an op that touches none, which every later step would answer the same for it."""
        tensor, shadows = self.torch.Tensor, self.shadows
        for value in values:
            for t in (value,) if isinstance(value, tensor) else value if isinstance(value, (list, tuple)) else ():
                if isinstance(t, tensor):
                    try:
                        if t.untyped_storage().data_ptr() in shadows:
                            return True
                    except (RuntimeError, NotImplementedError):  # storage-less tensors: never tracked
                        pass
        return False

    def _plan(self, func):
        """What `dispatch` needs to know of an op, worked out once per op: every op of a test run
        passes here, and reading an op's schema costs more than most ops do."""
        name = func._overloadpacket.__name__
        if name in _ALLOCATORS:
            kind = _ALLOCATES
        elif name in _GROWS:
            kind = _GROWING
        elif name in _METADATA or func.is_view or name.endswith("_like") or name.startswith("new_"):
            kind = _PASSES
        else:
            kind = _USES
        schema = func._schema.arguments
        plan = self.plans[func] = _Plan(
            kind=kind, name=name, label=str(func), arguments=tuple(a.name for a in schema),
            # the arguments the schema marks as written: name -> True for `out=` ones (never read)
            written={a.name: a.kwarg_only for a in schema if a.alias_info is not None and a.alias_info.is_write},
            custom=func.namespace not in ("aten", "prims"), moves=name in _MOVES, overwrites=name in _OVERWRITE,
            partial=name in _PARTIAL, accumulates=name in ("index_put_", "_index_put_impl_", "put_"))
        return plan

    def _growing(self, func, args, kwargs):
        """`resize_`/`set_` that grow their tensor's own storage: the new bytes are unwritten (a storage
        the tensor is set to instead keeps the shadow it has)."""
        t = args[0]
        before = t.untyped_storage()
        old, size, key = self.shadow(t), before.nbytes(), before.data_ptr()
        result = func(*args, **kwargs)
        after = t.untyped_storage()
        if after is not before or after.nbytes() <= size:
            return result
        site = old.site if old is not None else self._site()
        if site is None:
            return result
        elem = old.elem if old is not None else t.element_size()
        mask = self.torch.zeros((after.nbytes() // elem,), dtype=self.torch.bool)
        if old is not None:
            mask[: old.mask.numel()] = old.mask
            self.shadows.pop(key, None)
        else:
            mask[: size // elem] = True
            self.allocated_at(site)
        self.shadows[after.data_ptr()] = _Shadow(weakref.ref(after), mask, elem, site)
        return result

    def propagate(self, func, a, result):
        """A copying op: the same op on the masks says which elements of its output are unwritten
        (in-place ones write their `self`'s mask; the others give `result` a shadow of its own).
        False when the masks cannot follow it: the caller then counts the data as read."""
        torch = self.torch
        name = func._overloadpacket.__name__
        inplace = name in _INPLACE_MOVES
        sources = [t for n in _DATA if n in a and not (n == "self" and inplace) for t in _tensors(a[n], torch)]
        sites = [sh.site for sh in map(self.shadow, sources) if sh is not None]
        if not sites and not (inplace and self.shadow(a["self"]) is not None):
            return True  # nothing unwritten flows anywhere
        target = a["self"] if inplace else result
        if not isinstance(target, torch.Tensor):
            return False
        try:
            mask = self._moved_mask(func, name, a)
        except (RuntimeError, TypeError, ValueError, IndexError, NotImplementedError):
            return False
        if mask.shape != target.shape:
            return False
        sh = self.shadow(target)
        if sh is None:
            if bool(mask.all()):
                return True
            sh = self._new_shadow(target, sites[0], initialised=True)
        view = self._view(sh, target)
        if view.shape != target.shape:  # a reinterpreted dtype: only a write of all of it is followed
            if not bool(mask.all()):
                return False
            view.fill_(True)
            return True
        view.copy_(mask)
        return True

    def _moved_mask(self, func, name, a):
        """`func` run on the masks: data arguments by their masks, written scalars by True, other
        tensors (indices, conditions) on the CPU; an `out=` form by its functional one."""
        torch, m, cpu = self.torch, self._mask_of, _cpu(self.torch)
        if name in ("clone", "_to_copy"):  # their options (dtype, device) are not the mask's
            return m(a["self"]).clone()

        def masked(arg, value):
            if arg in _DATA and isinstance(value, torch.Tensor):
                return m(value)
            if arg in _DATA and isinstance(value, (list, tuple)):
                return [m(t) if isinstance(t, torch.Tensor) else t for t in value]
            if arg in _WRITTEN_SCALARS and isinstance(value, (bool, int, float, complex)):
                return True
            return [cpu(v) for v in value] if isinstance(value, (list, tuple)) else cpu(value)

        mapped = {arg: masked(arg, value) for arg, value in a.items() if arg != "out"}
        if name == "constant_pad_nd":
            mapped["value"] = True  # the padding is written, whatever its default
        if name in _INPLACE_MOVES:
            mapped["self"] = mapped["self"].clone()  # the shadow itself is written by the caller
        return func._overloadpacket(**mapped)

    def _mask_of(self, t):
        """Which elements of `t` hold written values, in `t`'s shape (all, for an untracked tensor)."""
        sh = self.shadow(t)
        if sh is None:
            return self.torch.ones(t.shape, dtype=self.torch.bool)
        view = self._view(sh, t)
        return view if view.shape == t.shape else self.torch.full(t.shape, bool(view.all()), dtype=self.torch.bool)

    # -- shadows ----------------------------------------------------------------------------
    def track(self, t):
        if isinstance(t, self.torch.Tensor) and t.numel() > 0:
            site = self._site()
            if site is not None:
                sh = self._new_shadow(t, site, initialised=False)
                self.allocated_at(site)
                self._in_call(sh)

    # -- what the call that made a buffer left written ---------------------------------------
    # A clear taken only at the tests' sizes (`b[: n * (n <= 64)] = 0`) runs every line at every size:
    # what differs is what the call that allocated the buffer leaves written when it returns.
    def _entry(self):
        """The outermost frame on this thread's stack in a target file: the call into the changed code."""
        f, entry = sys._getframe(2), None
        while f is not None:
            if os.path.abspath(f.f_code.co_filename) in self.targets:
                entry = f
            f = f.f_back
        return entry

    def _in_call(self, sh):
        entry = self._entry()
        if entry is None:
            return
        tid = threading.get_ident()
        call = self.calls.get(tid)
        if call is not None and call[0] is not entry:
            self._returned(tid)
            call = None
        if call is None:
            call = self.calls[tid] = [entry, []]
        call[1].append(sh)

    def _settle_calls(self):
        """Once the call that made this thread's buffers has returned (it is off the stack), count them."""
        call = self.calls.get(threading.get_ident())
        if call is None:
            return
        f = sys._getframe(2)
        while f is not None:
            if f is call[0]:
                return
            f = f.f_back
        self._returned(threading.get_ident())

    def _returned(self, tid):
        """Counted per allocation site and order within the call: a helper that makes every buffer is one
        site, and one buffer it leaves unwritten at every size must not hide another it writes only at some."""
        call = self.calls.pop(tid, None)
        made = {}
        for sh in call[1] if call is not None else ():
            nth = made[sh.site] = made.get(sh.site, -1) + 1
            if sh.storage() is None:
                continue  # freed inside the call: nothing left to read
            counts = self.by_return.setdefault((sh.site, nth), [0, 0])
            counts[0] += 1
            counts[1] += bool(sh.mask.all())

    def allocated_at(self, site):
        if site not in self.allocated:  # which lines ran uninitialised, for the harness to compare
            self.allocated.add(site)
            self.rows.write(json.dumps({"alloc": site, "pid": os.getpid()}))

    def track_storage(self, storage, site):
        """An UntypedStorage allocated unwritten (its mask in bytes)."""
        if storage.nbytes() > 0:
            mask = self.torch.zeros((storage.nbytes(),), dtype=self.torch.bool)
            sh = self.shadows[storage.data_ptr()] = _Shadow(weakref.ref(storage), mask, 1, site)
            self.allocated_at(site)
            self._in_call(sh)

    def track_host(self, t, written, site):
        """A tensor over memory from outside aten: `written` (a bool tensor in `t`'s shape, or one bool for
        all of it) says which elements hold values."""
        if not isinstance(t, self.torch.Tensor) or t.numel() == 0:
            return
        if self.shadow(t) is None and bool(written.all()):
            return
        sh = self.shadow(t)
        if sh is None:
            sh = self._new_shadow(t, site, initialised=True)
            self._in_call(sh)
        view = self._view(sh, t)
        if view.shape == t.shape and written.shape == t.shape:
            view.copy_(written)
        else:
            view.fill_(bool(written.all()))
        self.allocated_at(site)

    def unwatched(self, site, how):
        key = ("unwatched", site, how)
        if key not in self.seen:
            self.seen.add(key)
            self.rows.write(json.dumps({"unwatched": site, "how": how, "pid": os.getpid()}))

    def _new_shadow(self, t, site, initialised):
        storage = t.untyped_storage()
        elem = t.element_size()
        mask = self.torch.full((storage.nbytes() // elem,), initialised, dtype=self.torch.bool)
        sh = self.shadows[storage.data_ptr()] = _Shadow(weakref.ref(storage), mask, elem, site)
        return sh

    def shadow(self, t):
        if not isinstance(t, self.torch.Tensor) or t.is_meta:
            return None
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse, nested and other storage-less tensors: never tracked
            return None
        key = storage.data_ptr()
        sh = self.shadows.get(key)
        if sh is None:
            return None
        if sh.storage() is not storage:  # the tracked storage is gone; its address was reused
            del self.shadows[key]
            return None
        return sh

    def _view(self, sh, t):
        """The mask elements `t` covers, in `t`'s shape when its dtype matches the allocation's."""
        e = t.element_size()
        if e == sh.elem:
            try:
                return sh.mask.as_strided(t.shape, t.stride(), t.storage_offset())
            except RuntimeError:
                pass
        low = t.storage_offset() * e
        span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if n > 0)
        return sh.mask[low // sh.elem: -(-(low + span * e) // sh.elem)]

    def check_read(self, t, op, arg):
        sh = self.shadow(t)
        if sh is None or t.numel() == 0:
            return
        view = self._view(sh, t)
        if bool(view.all()):
            return
        if sh.site == _CANARY:
            self.canary = True
            return
        test = os.environ.get("PERFAGENT_TEST") or os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
        at, via = self._callers()
        if at is not None and _REPORTERS.search(at):
            return  # a test runner printing a failure's values: what the code read came first
        key = (sh.site, op, arg, at, test)
        if key not in self.seen:
            self.seen.add(key)
            missing = ~view
            first = [int(i) for i in missing.nonzero()[0]] if missing.dim() else []
            self.rows.write(json.dumps({"site": sh.site, "op": op, "arg": arg, "uninitialised": int(missing.sum()),
                                        "of": int(view.numel()), "index": first, "shape": list(t.shape),
                                        "at": at, "via": via, "test": test or None, "pid": os.getpid()}))
        if sh.site in self.heal:
            self._zero_unwritten(sh)

    def _zero_unwritten(self, sh):
        """Zero every unwritten byte of the tracked storage and count it written: from here on the buffer
        holds what the `torch.zeros` it replaced held, so the code runs on as the base's does."""
        from torch.utils._python_dispatch import _disable_current_modes

        storage = sh.storage()
        if storage is None:
            return
        with _disable_current_modes():
            data = self.torch.empty(0, dtype=self.torch.uint8, device=storage.device).set_(storage)
            unwritten = ~sh.mask.repeat_interleave(sh.elem)
            n = min(unwritten.numel(), data.numel())
            data[:n].masked_fill_(unwritten[:n].to(storage.device), 0)
            sh.mask.fill_(True)

    def mark(self, t):
        sh = self.shadow(t)
        if sh is not None:
            self._view(sh, t).fill_(True)

    def mark_partial(self, name, t, args):
        sh = self.shadow(t)
        if sh is None:
            return
        view = self._view(sh, t)
        if view.shape != t.shape:  # a reinterpreted dtype: count the whole view as written
            view.fill_(True)
            return
        cpu = _cpu(self.torch)
        a = list(args) + [None] * 4
        if name == "index_fill_":
            view.index_fill_(a[1], cpu(a[2]), True)
        elif name == "masked_fill_":
            view.masked_fill_(cpu(a[1]), True)
        elif name == "put_":
            view.put_(cpu(a[1]), self.torch.ones(a[1].shape, dtype=self.torch.bool))

    # -- where ------------------------------------------------------------------------------
    def _outside(self, filename):
        return not filename.startswith(self.torch_dir) and not filename.startswith(_HERE) and filename != __file__

    def _site(self):
        """'file:line' of the innermost caller outside torch and perfagent, if it is a target file."""
        f = sys._getframe(2)
        while f is not None and not self._outside(f.f_code.co_filename):
            f = f.f_back
        if f is None:
            return None
        name = os.path.abspath(f.f_code.co_filename)
        return "%s:%d" % (name, f.f_lineno) if name in self.targets else None

    def _callers(self):
        """Where the read happened (innermost frame outside torch), and the innermost frame in a target
        file above it (the code under test that led there), as 'file:line (function)'."""
        f, at, via = sys._getframe(2), None, None
        while f is not None:
            name = f.f_code.co_filename
            if self._outside(name):
                where = "%s:%d (%s)" % (os.path.abspath(name), f.f_lineno, f.f_code.co_name)
                at = at or where
                if os.path.abspath(name) in self.targets:
                    via = where
                    break
            f = f.f_back
        return at, via if via != at else None


# The pattern numpy.empty's arrays are filled with, per element size: a NaN whose payload arithmetic does not
# produce (floats; a complex number's two halves), or the largest value (ints), or True.
_NAN_BITS = {2: 0x7E5A, 4: 0x7FC5A5A5, 8: 0x7FF8A5A5A5A5A5A5}
_ZEROED = (bytes, bytearray, str)  # Python objects whose memory is always written (array.array, mmap: by name)


class _HostSources:
    """Memory that reaches a tensor without an aten allocator: numpy's, an UntypedStorage's, a buffer's."""

    def __init__(self, sanitizer):
        self.s = sanitizer
        self.torch = sanitizer.torch
        self.arrays = {}  # id(array) -> (weakref to it, its allocation site): numpy.empty from a target line
        self.from_numpy = self.torch.from_numpy

    def install(self, after_import):
        torch = self.torch
        for name in ("from_numpy", "as_tensor", "asarray", "tensor", "frombuffer"):
            self._wrap_source(name)
        storage_type = torch.UntypedStorage
        new = storage_type.__new__
        s = self.s

        def created(cls, *args, **kwargs):
            storage = new(cls, *args, **kwargs)
            if cls is storage_type and len(args) == 1 and type(args[0]) is int and not kwargs.keys() - {"device"}:
                if s._outside(sys._getframe(1).f_code.co_filename):  # not torch's own (torch.load fills its own)
                    site = s._site()
                    if site is not None:
                        s.track_storage(storage, site)
            return storage

        storage_type.__new__ = staticmethod(created)
        after_import("numpy", self._wrap_numpy)

    # -- numpy's allocators --------------------------------------------------------------------
    def _wrap_numpy(self, np):
        for name in ("empty", "empty_like"):
            original = getattr(np, name, None)
            if original is not None:
                setattr(np, name, self._allocator(np, original))

    def _allocator(self, np, original):
        def allocate(*args, **kwargs):
            a = original(*args, **kwargs)
            site = self.s._site() if isinstance(a, np.ndarray) and a.size else None
            if site is not None and _fill(np, a):
                self.arrays[id(a)] = (weakref.ref(a), site)
                self.s.allocated_at(site)
            return a

        allocate.__wrapped__ = original
        return allocate

    # -- where tensors meet outside memory ------------------------------------------------------
    def _wrap_source(self, name):
        original = getattr(self.torch, name)
        # code torch.compile traces calls this too: there the answer is a constant and the masks are not traced
        compiling = getattr(getattr(self.torch, "compiler", None), "is_compiling", lambda: False)

        def source(*args, **kwargs):
            result = original(*args, **kwargs)
            if args and not compiling():
                try:
                    self._follow(name, args, kwargs, result)
                except (RuntimeError, TypeError, ValueError, AttributeError):
                    pass  # a form the masks cannot follow: the tensor stays as aten sees it
            return result

        setattr(self.torch, name, source)

    def _follow(self, name, args, kwargs, result):
        np = sys.modules.get("numpy")
        data = args[0]
        if name == "frombuffer":
            while isinstance(data, memoryview):
                data = data.obj
        elif np is None or not isinstance(data, np.ndarray):
            return
        owner = _owner(np, data) if np is not None and isinstance(data, np.ndarray) else data
        tracked = self._tracked(owner)
        if tracked is None:
            how = _unwatched(np, owner)
            if how is not None:
                at = self.s._site()
                if at is not None:
                    self.s.unwatched(at, "torch.%s of %s" % (name, how))
            return
        written = _written(np, data)
        if name == "frombuffer":
            offset = kwargs.get("offset", args[3] if len(args) > 3 else 0)
            es, n = result.element_size(), result.numel()
            by_byte = np.repeat(written.reshape(-1), data.itemsize)[offset: offset + n * es]
            written = by_byte.reshape(n, es).all(axis=1).reshape(tuple(result.shape))
        self.s.track_host(result, self.from_numpy(np.ascontiguousarray(written)), tracked)

    def _tracked(self, owner):
        entry = self.arrays.get(id(owner))
        return entry[1] if entry is not None and entry[0]() is owner else None


def _owner(np, a):
    """The object that owns an array's memory: the array that allocated it, or a foreign object."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    while isinstance(a, memoryview):
        a = a.obj
    return a


def _unwatched(np, owner):
    """What the memory is when no allocator perfagent watches made it, or None where it is always written
    (numpy's own allocations but numpy.empty's, bytes, bytearray, array.array, mmap, ctypes' own)."""
    if np is not None and isinstance(owner, np.ndarray):
        return None
    kind = type(owner).__module__ + "." + type(owner).__name__
    if isinstance(owner, _ZEROED) or kind in ("array.array", "mmap.mmap"):
        return None
    if hasattr(owner, "_b_needsfree_"):  # ctypes: zero-filled when it allocated the memory itself
        return None if owner._b_needsfree_ and owner._b_base_ is None else "ctypes memory (%s)" % kind
    return "memory of a %s (an allocator perfagent does not watch)" % kind


def _fill(np, a):
    """Write the pattern into `a`; False for a dtype that has none (the array is then not tracked)."""
    kind, size = a.dtype.kind, a.dtype.itemsize
    if not a.dtype.isnative:
        return False
    if kind == "f" and size in _NAN_BITS:
        a.view("u%d" % size).fill(_NAN_BITS[size])
    elif kind == "c" and size // 2 in _NAN_BITS:
        for half in (a.real, a.imag):
            half.view("u%d" % (size // 2)).fill(_NAN_BITS[size // 2])
    elif kind in "iu":
        a.fill(np.iinfo(a.dtype).max)
    elif kind == "b":
        a.fill(True)
    else:
        return False
    return True


def _written(np, a):
    """Which elements of `a` no longer hold the pattern (bool array in `a`'s shape)."""
    kind, size = a.dtype.kind, a.dtype.itemsize
    if kind == "f":
        return a.view("u%d" % size) != _NAN_BITS[size]
    if kind == "c":
        u = "u%d" % (size // 2)
        return (a.real.view(u) != _NAN_BITS[size // 2]) | (a.imag.view(u) != _NAN_BITS[size // 2])
    if kind in "iu":
        return a != np.iinfo(a.dtype).max
    return ~a


def _cpu(torch):
    return lambda x: x.cpu() if isinstance(x, torch.Tensor) else x


def _tensors(value, torch):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []
