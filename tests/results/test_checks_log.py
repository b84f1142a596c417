"""agent.results.checks_log: checks.json's one schema, writer and reader, and the one rule for which grading
report.json carries. Files as older perfagents wrote them still load; a corrupt one is never a traceback."""

from __future__ import annotations

import json

import pytest

from agent.checks.evaluation import Evaluation
from agent.checks.evidence import Evidence, EvidenceError
from agent.env.candidate import LeftOut
from agent.results.checks_log import (ChecksLog, Grading, carried, checks_file, every_grading, load_recorded,
                                      parse_checks, read_checks)
from agent.results.report import Report, read_report
from agent.util.seal import load_key


def evaluation(verdict: str = "pass", duration_s: float = 2.0, **kw) -> Evaluation:
    return Evaluation(verdict=verdict, duration_s=duration_s, task_id="t", **kw)


def report(ev: Evaluation | None, **kw) -> Report:
    """A report as read back from report.json: `checks_entry` there or not, as `kw` says."""
    return Report.parse({"type": "result", "evaluation": ev.model_dump(mode="json") if ev else None, **kw})


def test_what_the_writer_appends_reads_back_whole_and_regrades_from_its_seal(tmp_path):
    log = ChecksLog(checks_file(tmp_path))
    quick = Grading(time=1.0, full=False, evaluation=evaluation("fail"), evidence=Evidence(task_id="t", quick=True))
    full = Grading(time=2.0, full=True, evaluation=evaluation(), evidence=Evidence(task_id="t", duration_s=2.0),
                   left_out=[LeftOut(path="core", size=10, reason="binary")])
    assert [log.append(quick), log.append(full)] == [0, 1]
    written = json.loads(checks_file(tmp_path).read_text())
    assert [sorted(e) for e in written] == [["evaluation", "evidence", "full", "time"],  # no index, no empty left_out
                                            ["evaluation", "evidence", "full", "left_out", "time"]]
    back = read_checks(tmp_path)
    assert back == log.gradings and [g.index for g in back] == [0, 1]
    assert back[1].evaluation == full.evaluation and back[1].evidence == full.evidence
    assert back[1].left_out[0].size == 10
    assert load_recorded(tmp_path, load_key()) == back  # the job folder or the file itself, sealed
    assert load_recorded(checks_file(tmp_path), load_key())[1].evidence.duration_s == 2.0


def test_a_file_older_perfagents_wrote_still_loads(tmp_path):
    """No evidence (before it was kept), no time, a null `full`, fields since dropped, the computed `speedup`."""
    old = [{"full": True, "evaluation": {"verdict": "pass", "duration_s": 3.0, "speedup": None, "gone": 1}},
           {"time": None, "full": None, "evaluation": {"verdict": "fail", "duration_s": 1.0}}]
    checks_file(tmp_path).write_text(json.dumps(old))
    first, second = read_checks(tmp_path)
    assert (first.full, first.time, first.evidence, first.evaluation.duration_s) == (True, 0.0, None, 3.0)
    assert (second.full, second.time, second.evaluation.verdict) == (False, 0.0, "fail")


@pytest.mark.parametrize("text", ["", "not json", "{}", '{"evaluation": {}}', "[1, 2]", '"checks"', "null",
                                  "[" * 100_000 + "]" * 100_000, b"\xff\xfe[]"])
def test_a_corrupt_file_holds_no_gradings_and_never_raises(tmp_path, text):
    checks_file(tmp_path).write_bytes(text if isinstance(text, bytes) else text.encode())
    assert read_checks(tmp_path) == []
    assert read_checks(tmp_path / "missing") == []


def test_an_unreadable_entry_is_skipped_and_an_unreadable_part_is_none_each_keeping_its_place():
    data = ["a string", {"time": "noon", "evaluation": {"verdict": "pass"}},
            {"time": 5, "full": True, "evaluation": {"verdict": "no such verdict"}, "evidence": {"changes": "perhaps"}},
            {"time": 6, "evaluation": {"verdict": "pass"}}]
    read = parse_checks(data)
    assert [(g.index, g.evaluation, g.evidence) for g in read.gradings[:1]] == [(2, None, None)]
    assert [g.index for g in read.gradings] == [2, 3] and read.gradings[1].evaluation.verdict == "pass"
    assert [(u.entry, u.part) for u in read.unreadable] == [(0, "entry"), (1, "entry"), (2, "evaluation"),
                                                            (2, "evidence")]
    assert "time" in read.unreadable[1].why and "verdict" in read.unreadable[2].why


def test_regrading_refuses_what_it_cannot_read_or_did_not_seal_in_one_line(tmp_path):
    from agent.util.seal import write_sealed_json

    write_sealed_json(checks_file(tmp_path), [{"evidence": {"changes": "perhaps"}}])
    with pytest.raises(EvidenceError, match=r"not evidence perfagent wrote: entry 1: changes: "):
        load_recorded(tmp_path, load_key())
    write_sealed_json(checks_file(tmp_path), [{"full": True, "evaluation": {"verdict": "pass"}}])
    with pytest.raises(EvidenceError, match="carry no evidence"):
        load_recorded(tmp_path, load_key())
    checks_file(tmp_path).write_text("[]")  # changed since it was sealed
    with pytest.raises(EvidenceError, match="has a MAC that does not verify"):
        load_recorded(tmp_path, load_key())
    write_sealed_json(tmp_path / "evidence.json", Evidence(task_id="t").model_dump(mode="json"))  # check --evidence
    (one,) = load_recorded(tmp_path / "evidence.json", load_key())
    assert one.evidence.task_id == "t" and one.evaluation is None


def gradings() -> list[Grading]:
    return parse_checks([{"time": 1, "full": False, "evaluation": evaluation("pass", 1.0).model_dump(mode="json")},
                         {"time": 2, "full": True, "evaluation": evaluation("fail", 4.0).model_dump(mode="json")},
                         {"time": 3, "full": False, "evaluation": evaluation("pass", 1.0).model_dump(mode="json")},
                         "torn"]).gradings


def test_a_report_that_names_its_grading_is_taken_at_its_word():
    log = gradings()
    assert carried(log, report(evaluation("fail", 4.0), checks_entry=1)) is log[1]
    assert carried(log, report(evaluation("pass", 1.0), checks_entry=0)) is log[0]  # not the last look-alike
    assert carried(log, report(evaluation("error", 9.0), checks_entry=None)) is None  # graded nothing
    assert every_grading(log, report(evaluation("error", 9.0), checks_entry=None)) == log
    lost = carried(log, report(evaluation("pass", 7.0), checks_entry=3))  # the file lost it: the report's own
    assert lost.index is None and lost.evaluation.duration_s == 7.0 and lost.full
    assert every_grading(log, report(evaluation("pass", 7.0), checks_entry=3))[-1] == lost


def test_an_older_report_carries_the_last_entry_equal_to_it_but_for_the_runners_fields():
    log = gradings()
    said = {"emitted": "best passing candidate (quick evaluation; interrupted by SIGTERM)", "warnings": ["w"],
            "note": "n"}
    assert carried(log, report(evaluation("pass", 1.0, **said))) is log[2]  # quick: a salvaged run carries one
    assert carried(log, report(evaluation("fail", 4.0, emitted="x"))) is log[1]
    assert every_grading(log, report(evaluation("fail", 4.0))) == log  # counted once
    assert carried(log, report(evaluation("error", 0.0))) is None  # took no time: nothing was graded
    assert carried(log, report(None)) is None and carried(log, None) is None
    after = report(evaluation("pass", 30.0))  # graded after the loop, never logged (older runners)
    assert [g.evaluation.duration_s for g in every_grading(log, after)] == [1.0, 4.0, 1.0, 30.0]
    assert every_grading([], after)[0].full and carried([], after).index is None


def test_a_report_keeps_saying_whether_it_names_its_grading_when_rewritten(tmp_path):
    old = {"type": "result", "evaluation": evaluation().model_dump(mode="json")}
    (tmp_path / "report.json").write_text(json.dumps(old))
    older = read_report(tmp_path / "report.json")
    assert "checks_entry" not in older.to_dict()  # null would say it carries no grading
    none = older.model_copy(update={"checks_entry": None})
    assert none.to_dict()["checks_entry"] is None
    none.write(tmp_path / "report.json")
    assert carried(gradings(), read_report(tmp_path / "report.json")) is None
