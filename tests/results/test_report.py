"""agent.results.report: report.json's one reader says what is wrong with a file in one line, never a traceback."""

from __future__ import annotations

import pytest

from agent.results.report import ReportError, read_report


@pytest.mark.parametrize("data, said", [(b"[" * 100_000 + b"]" * 100_000, "RecursionError"),
                                        (b"\xff{}", "UnicodeDecodeError"), (b"[]", 'no "type": "result"')])
def test_a_report_no_reader_can_use_is_one_line(tmp_path, data, said):
    (tmp_path / "report.json").write_bytes(data)
    with pytest.raises(ReportError, match="^report.json corrupt: .*" + said) as e:
        read_report(tmp_path / "report.json")
    assert "\n" not in str(e.value)
