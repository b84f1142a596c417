"""The top-level module names an interpreter can import without the current folder on its path.

    python -c "$(source of this file)"    (in an empty folder, without PYTHONPATH)

Run by `agent.checks.integrity.installed_top_level_modules` with the target's interpreter, from its text, so
sys.path is the interpreter's own (with the current folder, left out here) and not this file's folder. The
standard library, builtins, everything on sys.path and the names editable installs map in a finder. Stdlib only,
any Python 3; prints one JSON list.
"""

import json
import os
import pkgutil
import sys


def main():
    cwd = os.path.realpath(os.getcwd())
    paths = [p for p in sys.path if p and os.path.realpath(p) != cwd]
    names = set(sys.builtin_module_names) | set(getattr(sys, "stdlib_module_names", ()))
    names |= {m.name for m in pkgutil.iter_modules(paths)}
    for finder in sys.meta_path:  # editable installs map their names in a finder
        mapping = getattr(sys.modules.get(getattr(finder, "__module__", "")), "MAPPING", None)
        names |= set(mapping) if isinstance(mapping, dict) else set()
    print(json.dumps(sorted(names)))


if __name__ == "__main__":
    main()
