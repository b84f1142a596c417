"""What the metering relay costs per API request: `python tests/bench/bench_relay.py [-n 200]`.

A scripted Messages API on 127.0.0.1 answers; one sandboxed client process sends the same
request three ways, alternating: straight to the server (no sandbox network in the way: the
client runs unsealed for this leg), through the relay's Unix socket, and from inside the
sandbox through the bridge and the relay (the path an external agent takes). Prints JSON lines
{"metric", "value", "unit"}: the median time per request of each, and the overhead of each hop,
for a plain JSON answer and a streamed one.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fakeserver import FakeServer, reply  # noqa: E402

from agent.agents.metering import Meter  # noqa: E402
from agent.agents.relay import Relay, Upstream, bridge_command  # noqa: E402
from agent.env.sandbox import SandboxSpec, base_env, run_command  # noqa: E402
from agent.models.pricing import load_prices  # noqa: E402

# One client, timing n requests to one URL; prints the per-request times in ms as one JSON list.
CLIENT = r"""
import http.client, json, socket, sys, time
target, n, stream = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
body = json.dumps({"model": "claude-sonnet-4-6", "max_tokens": 16, "stream": stream,
                   "messages": [{"role": "user", "content": "hi"}]})
class UnixConnection(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX); self.sock.connect(target)
conn = UnixConnection("relay") if target.startswith("/") else http.client.HTTPConnection(*target.split(":"))
times = []
for _ in range(n):
    t = time.perf_counter()
    conn.request("POST", "/v1/messages", body, {"content-type": "application/json"})
    conn.getresponse().read()
    times.append((time.perf_counter() - t) * 1000)
print(json.dumps(times))
"""


def timed(times: list[float]) -> float:
    times = sorted(times[5:])  # the first few open connections and warm caches
    return times[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=200, help="requests per way and mode")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-relay-", dir="/tmp") as tmp, FakeServer() as server:
        work = Path(tmp)
        (work / "client.py").write_text(CLIENT)
        server.script([reply("hello", usage={"input_tokens": 100, "output_tokens": 10})] * (args.n * 6 + 10))
        host = server.url.removeprefix("http://")
        with Relay(Upstream("anthropic", server.url, None), Meter(load_prices()), work / "relay.sock") as relay:
            for stream in ("0", "1"):
                direct = subprocess.run([sys.executable, "client.py", host, str(args.n), stream], cwd=work,
                                        capture_output=True, text=True, check=True)
                via_socket = subprocess.run([sys.executable, "client.py", str(relay.socket_path), str(args.n), stream],
                                            cwd=work, capture_output=True, text=True, check=True)
                sealed = run_command(bridge_command(sys.executable, relay.socket_path)
                                     + f"{sys.executable} client.py 127.0.0.1:8787 {args.n} {stream}", work,
                                     env=base_env(), sandbox=SandboxSpec(readable=(work,)), timeout_s=600)
                d, r = timed(json.loads(direct.stdout)), timed(json.loads(via_socket.stdout))
                s = timed(json.loads(sealed.output.strip().splitlines()[-1]))
                mode = "stream" if stream == "1" else "json"
                for metric, value in ((f"direct_{mode}_ms", d), (f"relay_{mode}_ms", r), (f"sealed_{mode}_ms", s),
                                      (f"relay_overhead_{mode}_ms", r - d), (f"sealed_overhead_{mode}_ms", s - d)):
                    print(json.dumps({"metric": metric, "value": round(value, 3), "unit": "ms"}))
            print(json.dumps({"metric": "metered_requests", "value": relay.meter.requests, "unit": "requests"}))


if __name__ == "__main__":
    main()
