"""`pyast.parse` under threads: the CPython 3.11 race that failed a check with an internal error."""

from __future__ import annotations

import ast
import gc
import threading
import time

from agent.util import pyast

SOURCE = "\n".join(f"def f{i}(a, b=[1, 2, {{3: 4}}]):\n    return [y for y in a if y and b or (lambda q: (q, (q,)))(y)]"
                   for i in range(300))


def _errors_when_raced(parse) -> list[str]:
    """Four threads parse at once while every garbage collection yields the GIL to another thread (as a
    finalizer that waits would): the interleaving that breaks 3.11's per-interpreter AST counter."""
    errors: list[str] = []

    def yield_gil(phase, info):
        if phase == "start":
            time.sleep(0.0001)

    def work():
        for _ in range(15):
            try:
                tree = parse(SOURCE)
                assert len(tree.body) == 300
            except SystemError as e:
                errors.append(str(e))

    gc.callbacks.append(yield_gil)
    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        gc.callbacks.remove(yield_gil)
    return errors


def test_threads_parsing_at_once_never_fail_a_sound_parse():
    raw = _errors_when_raced(ast.parse)  # 3.11: "AST constructor recursion depth mismatch"; later versions may not race
    assert _errors_when_raced(pyast.parse) == [], raw
