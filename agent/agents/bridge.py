"""The bridge inside an external agent's sandbox: 127.0.0.1:PORT there to the relay's Unix socket.

    python -I -c "$(source of this file)" PORT SOCKET

Run by `agent.agents.relay.bridge_command` with the harness's Python in isolated mode (no site, no environment,
no folder of ours on sys.path), from its text: the sandbox sees none of our files. Stdlib only, and nothing but
bytes copied between the sandbox's loopback and the socket, so the agent killing or replacing it gains nothing.
Prints `ready` once it listens.
"""

import socket
import sys
import threading


def pipe(a, b):
    """Copy `a` to `b` until `a` ends, then end `b`'s writing side."""
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    finally:
        try:
            b.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def serve(c, path):
    """One connection of the agent's, to one of the relay's."""
    u = socket.socket(socket.AF_UNIX)
    try:
        u.connect(path)
    except OSError:
        c.close()
        return
    threading.Thread(target=pipe, args=(u, c), daemon=True).start()
    pipe(c, u)


def main():
    port, path = int(sys.argv[1]), sys.argv[2]
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(64)
    print("ready", flush=True)
    while True:
        c, _ = srv.accept()
        threading.Thread(target=serve, args=(c, path), daemon=True).start()


if __name__ == "__main__":
    main()
