"""Correctness check for FlashAttentionBackend's CUDA-graph path (SGLang 0.4.6.post5) on CPU.

For every mode the backend captures (decode, local/chunked attention, encoder-decoder cross attention, EAGLE draft
decode with topk 1 and topk 2, EAGLE target verify with topk 1 and topk 2; page sizes 1 and 4 where the mode
supports them) it follows SGLang's graph runners: init_cuda_graph_state, then per captured batch size the capture
metadata, two warm-up forwards and the capture forward, then replays of random batches (some padded to a larger
captured size), each compared with attention computed from the batch itself. Stub kernels
(tests/stubs/sgl_kernel) check every tensor they read.

Run: python tests/check_cuda_graph.py [MODE ...]     (POISON=1: fill torch.empty memory with NaN / max-int)
Output: one `FAILED <mode>[ps<N>] - <reason>` line per failing mode, then `N failed, M passed` (exit 1);
or `M passed` (exit 0).
"""

from __future__ import annotations

import os
import sys
import time
import traceback
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sgl_world  # noqa: E402


def main(argv: list[str]) -> int:
    poisoned = sgl_world.poison_from_env()
    warnings.filterwarnings("ignore", message=".*deterministic.*")
    sg = sgl_world.import_sglang()
    from sgl_kernel._contract import TAPE, KernelContractError

    specs = [s for s in sgl_world.SPECS if not argv or s.name in argv or s.name.split("[")[0] in argv]
    if not specs:
        print(f"no mode matches {argv}; modes: {[s.name for s in sgl_world.SPECS]}")
        return 2
    failed, passed = [], 0
    t0 = time.perf_counter()
    for spec in specs:
        os.environ["PERFAGENT_TEST"] = spec.name  # names the mode in perfagent's sanitizer report
        sgl_world.CONTEXT.clear()
        TAPE.mode = None
        try:
            sgl_world.run_spec(sg, spec)
        except (KernelContractError, sgl_world.Mismatch) as e:
            failed.append((spec.name, f"{sgl_world.context()}: {e}"))
        except Exception as e:  # a crash inside the backend counts as a failure of the mode, with where it happened
            tb = traceback.extract_tb(e.__traceback__)
            where = next((f"{Path(f.filename).name}:{f.lineno}" for f in reversed(tb)
                          if "flashattention_backend" in f.filename), f"{Path(tb[-1].filename).name}:{tb[-1].lineno}")
            failed.append((spec.name, f"{sgl_world.context()}: {type(e).__name__} at {where}: {e}"))
        else:
            passed += 1
    for name, reason in failed:
        print(f"FAILED {name} - {' '.join(reason.split())}")
    mode = "poison" if poisoned else "plain"
    if failed:
        print(f"{len(failed)} failed, {passed} passed ({mode} mode, {time.perf_counter() - t0:.1f}s)")
        return 1
    print(f"{passed} passed ({mode} mode, {time.perf_counter() - t0:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
