from __future__ import annotations

from app.compression.notice import NOTICE_CHARS, notice_line, with_notice


def test_notice_is_one_short_line_in_the_language() -> None:
    summary = "Added 2 constraints.\n  3 confirmations pending.  " + "x" * 500
    line = notice_line(summary, "en")
    assert "\n" not in line
    assert len(line) <= NOTICE_CHARS
    assert line.startswith("Since the last compression: Added 2 constraints. 3 confirmations")
    assert notice_line("新增 1 条约束。无待确认事项。", "zh").startswith("自上次压缩以来：新增")
    assert notice_line("   ", "en") == ""


def test_with_notice_appends_a_last_line() -> None:
    assert with_notice("## State\n- a", "N") == "## State\n- a\nN"
    assert with_notice("", "N") == "N"
    assert with_notice("## State", "") == "## State"
