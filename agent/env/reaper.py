"""A subreaper between perfagent and bubblewrap, for `run_command(account_cpu=True)` (agent.env.sandbox).

    python -I -S reaper.py COMMAND ARGS...

bwrap exits on its init's word, before it reaps that init, so its own rusage holds none of the command's CPU
time; as a subreaper this process inherits the init when bwrap exits and reaps it (and with it everything the
init reaped, the whole sandbox), so waiting for it gives the sandbox's CPU time. Its exit status is the
command's. It runs on the host, out of the sandbox's reach, in isolated mode without site (stdlib only); ~12 ms.
"""

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36


def main():
    parent = os.getppid()
    libc = ctypes.CDLL(None)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # gone with perfagent (and bwrap, --die-with-parent, too)
    if os.getppid() != parent:
        sys.exit(1)
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(sys.argv[1], sys.argv[1:])
        finally:
            os._exit(127)
    code = 1
    while True:
        try:
            done, status = os.wait()
        except ChildProcessError:
            break
        if done == pid:
            code = os.waitstatus_to_exitcode(status)
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
