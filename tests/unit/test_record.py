"""The launch record alone: which failure wins, the statuses, a rank's log blocks."""

from notebook_launcher.launching.record import LaunchRecord


def test_record_picks_the_earliest_failure_not_the_first_reported():
    record = LaunchRecord(3)
    record.add_failure(0, RuntimeError("secondary: peer closed"), when=20.0)
    record.add_failure(2, ValueError("root cause"), when=10.0)
    record.finish()
    assert (record.status, record.failed_rank, str(record.failure)) == ("failed", 2, "root cause")
    assert [record.rank_status(r) for r in record.ranks] == ["failed", "stopped", "failed"]


def test_record_status_lifecycle():
    record = LaunchRecord(2, first_rank=2)
    assert record.status == "starting"
    record.set_rank_status(2, "running")
    assert record.status == "running"
    record.add_result(2, "a")
    record.finish()
    assert record.status == "stopped" and record.results == ["a", None]


def test_a_rank_log_stores_blocks_and_splits_only_what_is_asked_for():
    from notebook_launcher.launching.ranklog import RankLog

    log = RankLog(rank=3)
    log.add_text("stdout", "".join(f"line {i}\n" for i in range(10_000)), seq=0, when=1.0)
    log.add_text("stderr", "warn\x0cwith a form feed\n", seq=10_000, when=2.0)
    index, replaced = log.add_display({"text/plain": "shown"}, "d", False, seq=10_001, when=3.0)
    assert (log.count, index, replaced) == (10_002, 10_001, False)
    assert [(e.text, e.seq) for e in log.entries(9_999, 10_001)] == [
        ("line 9999\n", 9_999),
        ("warn\x0cwith a form feed\n", 10_000),
    ]
    assert log.add_display({"text/plain": "newer"}, "d", True, seq=10_002, when=4.0) == (10_001, True)
    assert log.entries(10_001)[0].text == "newer\n" and log.count == 10_002
    assert log.text("stderr") == "warn\x0cwith a form feed\n"


def test_a_renumbering_moves_statuses_and_logs_and_old_numbers_still_read_them():
    """A c10d restart can renumber a node's ranks (0–1 → 2–3) and renumber them back: lines keep the
    number they were written under, a reader holding a number from before reads the same rank."""
    record = LaunchRecord(2)
    record.add_output(1, "stdout", "attempt 0\n")
    record.renumber(2, "node 1 of 2")
    record.set_rank_status(3, "running")
    record.add_output(3, "stdout", "attempt 1\n")
    assert record.ranks == [2, 3] and record.rank_status(1) == record.rank_status(3) == "running"
    assert [(line.rank, line.text) for line in record.lines(1)] == [
        (1, "attempt 0\n"),
        (3, "── node 1 of 2: this node's ranks are 2–3 now ──\n"),
        (3, "attempt 1\n"),
    ]
    record.renumber(0, "node 0 of 2")
    record.add_result(0, "a")
    record.add_result(1, "b")
    record.finish()
    assert record.ranks == [0, 1] and record.results == ["a", "b"] and record.status == "succeeded"
    assert record.line_count(3) == record.line_count(1) == 4 and record.rank_status(2) == "done"
    record.renumber(0, "unchanged")  # the same numbers: nothing is written
    assert record.line_count(1) == 4
