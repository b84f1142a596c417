"""Red team, the budget through a real agent: Claude Code's shell steering the relay to a model it has no price for.

`perfagent run --agent claude-code --max-cost 2` runs as a real subprocess; its "model" is a scripted Messages
API on 127.0.0.1 that has the real `claude` CLI run the attack with its Bash tool. The attack talks to the relay
itself (the bridge on the sandbox's 127.0.0.1:8787), as any program in the sandbox can.

| attack (Claude Code's Bash tool)                                  | must hold                                      |
|-------------------------------------------------------------------|------------------------------------------------|
| one request naming a real model the price table lacks, then 12 of | the unpriced model is refused (never reaches   |
|   $1.20 each at a priced model, against a $2.00 budget            |   the provider); the spend stays within the    |
|                                                                   |   budget plus one request's worth; the report's|
|                                                                   |   total is a number; the run ends              |
|                                                                   |   `error_max_budget`                           |
"""

from __future__ import annotations

import json
import shutil
import threading

import pytest
from fakeserver import FakeServer, Recorded, reply, tool_call

from agent.models.base import Usage
from agent.models.pricing import cost_usd, load_prices
from redteam.lab import make_lab

pytestmark = pytest.mark.skipif(shutil.which("claude") is None, reason="Claude Code is not installed")

MODEL = "claude-sonnet-4-6"
UNPRICED = "claude-opus-9-9"  # a model id the price table lacks
BUDGET = 2.00
PRICED_REQUESTS = 12
# $1.20 at the table's $3/M input and $15/M output: 1,000 input tokens ($0.003) and 79,800 output ($1.197).
DEAR = {"input_tokens": 1000, "output_tokens": 79_800}
MARK = "redteam-budget-attack"  # in each attack request, so the scripted provider tells them from the agent's own


def _curl(model: str) -> str:
    body = json.dumps({"model": model, "max_tokens": 80_000, "messages": [{"role": "user", "content": MARK}]})
    return (f"curl -sS -m 30 http://127.0.0.1:8787/v1/messages -H 'content-type: application/json' "
            f"-H 'anthropic-version: 2023-06-01' -H 'x-api-key: whatever' -d '{body}'; echo")


ATTACK = "\n".join([f'echo "--- unpriced"; {_curl(UNPRICED)}',
                    f'for i in $(seq {PRICED_REQUESTS}); do echo "--- priced $i"; {_curl(MODEL)}; done'])


def _provider() -> tuple[list[str], object]:
    """The scripted provider: each attack request billed $1.20, the agent told to run the attack, then done."""
    billed: list[str] = []  # the model of each attack request the provider answered (and billed)
    lock = threading.Lock()
    agent_turns = iter([reply("", tool_call("Bash", command=ATTACK, description="spend"))])

    def answer(req: Recorded):
        if req.body.get("messages") == [{"role": "user", "content": MARK}]:  # not the agent's turn that shows it
            with lock:
                billed.append(str(req.body.get("model")))
            return reply("ok", usage=DEAR)
        return next(agent_turns, reply("All done."))
    return billed, answer


@pytest.mark.slow
def test_an_unpriced_model_cannot_switch_the_budget_off(tmp_path):
    price = cost_usd(MODEL, Usage(**DEAR), load_prices())
    assert price == pytest.approx(1.20)
    lab = make_lab(tmp_path, perf=False)
    billed, answer = _provider()
    with FakeServer() as server:
        server.script([answer] * 40)
        proc = lab.perfagent("run", str(lab.task), "--agent", "claude-code", "--model", MODEL,
                             "--base-url", server.url, "--run-id", "r1", "--out", str(lab.out), "--quiet",
                             "--rounds", "1", "--max-cost", str(BUDGET), timeout=300)
    report_path = lab.out / "results" / "r1" / lab.task_id / "report.json"
    assert report_path.is_file(), f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    report = json.loads(report_path.read_text())
    total = report["total_cost_usd"]
    print(f"provider answered {len(billed)} attack request(s) {billed}; report total {total}, "
          f"subtype {report['subtype']}")

    assert isinstance(total, (int, float)), f"the report's total is {total!r} ({report['subtype']})"
    assert len(billed) * price <= BUDGET + price, f"the provider billed {len(billed)} requests of ${price:.2f}"
    assert total <= BUDGET + price, f"spent ${total:.2f} of a ${BUDGET:.2f} budget"
    assert total == pytest.approx(len(billed) * price, abs=0.01)  # the agent's own two turns cost under a cent
    assert report["subtype"] == "error_max_budget", report["result"]
    assert billed and UNPRICED not in billed, f"the unpriced model reached the provider: {billed}"
    assert f"model {UNPRICED}" in report["agent"]["refused"]
