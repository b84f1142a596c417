"""What the task's interpreter is: its Python, and torch's and CUDA's versions as it would import them.

    python -c "$(source of this file)"

Run by `agent.checks.environment.probe` in the sandbox, from its text, so sys.path is what the task's own
commands see (the workspace first), not this file's folder. Reads torch/version.py on its own: importing torch
would cost seconds per checker. Stdlib only, any Python 3; prints one line, `PERFAGENT_ENV {json}`.
"""

import importlib.util
import json
import os
import platform


def main():
    info = {"python": platform.python_version()}
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.submodule_search_locations:
        path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
        version = importlib.util.spec_from_file_location("_perfagent_torch_version", path)
        module = importlib.util.module_from_spec(version)
        version.loader.exec_module(module)
        info["torch"], info["cuda"] = module.__version__, module.cuda
    print("PERFAGENT_ENV " + json.dumps(info))


if __name__ == "__main__":
    main()
