"""`parse`: `ast.parse` that threads may call at once. CPython 3.11 keeps one counter per interpreter while
it builds a tree's Python objects, so two threads parsing together can fail a sound parse with
`SystemError: AST constructor recursion depth mismatch` (python/cpython#106905). The harness parses in
threads (read sites while the tests run); a check must not end in an internal error for that."""

from __future__ import annotations

import ast
import threading

_ONE_AT_A_TIME = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)`, one of ours at a time; a parse that a library's own (coverage's
    parser, a traceback's carets) raced is parsed again once."""
    with _ONE_AT_A_TIME:
        try:
            return ast.parse(source, filename=filename)
        except SystemError as e:
            if "recursion depth mismatch" not in str(e):
                raise
            return ast.parse(source, filename=filename)
