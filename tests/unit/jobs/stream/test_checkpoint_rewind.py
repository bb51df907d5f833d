"""The rule refusing a rewound checkpoint, and the flush's intent (issue 29, items 3 and 4), without Spark.

The tables are written by ``deltalake`` with the ``txn`` actions delta-spark's idempotent appends leave;
Spark's offset and commit logs are files named by batch. The job's own runs are in
``tests/integration/spark/test_stream_recovery.py``.
"""

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, Transaction, write_deltalake

from jobs.stream.checkpoint.layout import CheckpointLayout
from jobs.stream.checkpoint.state import (
    CheckpointError,
    FlushIntent,
    check_not_rewound,
    clear_flush_intent,
    flush_app_id,
    last_planned_batch,
    read_flush_intent,
    record_flush_intent,
)

APP = "jobs.stream-0123456789abcdef"


def write(tmp: Path, table: str, app_id: str, version: int) -> None:
    """An append to ``table`` with the ``txn`` action of ``app_id``'s batch ``version``."""
    txn = CommitProperties(app_transactions=[Transaction(app_id, version)])
    data = pa.table({"batch_id": pa.array([version], pa.int64())})
    write_deltalake(str(tmp / "out" / table), data, mode="append", commit_properties=txn)


def spark_logs(tmp: Path, planned: int | None, committed: int | None) -> None:
    """Spark's offset log up to ``planned`` and commit log up to ``committed`` (None: empty)."""
    layout = CheckpointLayout(str(tmp / "ck"))
    for folder, last in ((layout.offsets, planned), (layout.commits, committed)):
        Path(folder.key).mkdir(parents=True, exist_ok=True)
        for n in range(0 if last is None else last + 1):
            (Path(folder.key) / str(n)).write_text("v1\n{}\n")


def check(tmp: Path) -> None:
    check_not_rewound(str(tmp / "ck"), str(tmp / "out"), APP)


def test_tables_up_to_the_newest_planned_batch_are_accepted(tmp_path):
    spark_logs(tmp_path, planned=5, committed=4)  # batch 5 interrupted: its appends may be done
    write(tmp_path, "aggregates", APP, 5)
    write(tmp_path, "quarantine", APP, 2)  # behind: batches 3-5 had no invalid record
    write(tmp_path, "late_events", APP, 3)  # behind: batches 4-5 wait in stage/pending
    write(tmp_path, "aggregates", flush_app_id(APP), 4)  # the flush at the end of an earlier run
    write(tmp_path, "arrivals", "jobs.stream-other", 40)  # another writer's batches are not this one's
    assert last_planned_batch(str(tmp_path / "ck")) == 5
    check(tmp_path)


@pytest.mark.parametrize(
    ("planned", "table", "app", "needle"),
    [
        (None, "aggregates", APP, "query/offsets is empty"),  # CHECKPOINT/query deleted
        (3, "aggregates", APP, "query/offsets ends at batch 3"),  # restored from an older copy
        (3, "watermark_log", APP, "query/offsets ends at batch 3"),  # a deferred table's commit
        (3, "aggregates", flush_app_id(APP), "query/offsets ends at batch 3"),  # the flush's append
    ],
)
def test_a_table_ahead_of_spark_s_offset_log_is_refused(tmp_path, planned, table, app, needle):
    spark_logs(tmp_path, planned=planned, committed=planned)
    write(tmp_path, table, app, 4)
    with pytest.raises(CheckpointError) as refused:
        check(tmp_path)
    text = str(refused.value)
    assert f"out/{table} holds batch 4 of this checkpoint's application id {app}" in text
    assert needle in text and "\n" not in text
    assert "restore the tables' folders" in text and "a new --output and a new --checkpoint" in text


def test_the_stage_ahead_of_spark_s_offset_log_is_refused(tmp_path):
    spark_logs(tmp_path, planned=None, committed=None)  # CHECKPOINT/query deleted, no table written yet
    layout = CheckpointLayout(str(tmp_path / "ck"))
    Path(layout.pending_batch(2).key).mkdir(parents=True)
    with pytest.raises(CheckpointError, match=r"pending/batch-0+2 belongs to batch 2, but .* is empty"):
        check(tmp_path)
    spark_logs(tmp_path, planned=2, committed=1)
    check(tmp_path)


def test_a_new_checkpoint_with_no_table_is_accepted(tmp_path):
    check(tmp_path)
    assert last_planned_batch(str(tmp_path / "ck")) is None


def test_the_flush_intent_is_written_read_and_cleared(tmp_path):
    ck = str(tmp_path / "ck")
    assert read_flush_intent(ck) is None
    record_flush_intent(ck, FlushIntent(7, flush_app_id(APP)))
    assert read_flush_intent(ck) == FlushIntent(7, APP + ".flush")
    clear_flush_intent(ck)
    assert read_flush_intent(ck) is None
    (tmp_path / "ck" / "stage" / "flush.json").write_text('{"batch_id": 7}')
    with pytest.raises(CheckpointError, match="unreadable flush intent"):
        read_flush_intent(ck)


def test_a_lost_application_id_file_is_refused_not_replaced_by_the_legacy_id(tmp_path):
    from jobs.stream.checkpoint.state import checkpoint_app_id

    spark_logs(tmp_path, planned=3, committed=3)
    write(tmp_path, "aggregates", APP, 3)
    write(tmp_path, "aggregates", flush_app_id(APP), 3)
    # CHECKPOINT/app-id deleted: the legacy id would write batches 0-3 again under another txnAppId
    with pytest.raises(CheckpointError, match=f"app-id is missing.*written under {APP}: put its line back"):
        checkpoint_app_id(str(tmp_path / "ck"), str(tmp_path / "out"))
    assert not Path(CheckpointLayout(str(tmp_path / "ck")).app_id.key).exists()  # nothing made up


def test_a_checkpoint_from_before_the_id_file_keeps_the_legacy_id_its_tables_hold(tmp_path):
    from jobs.stream.checkpoint.state import checkpoint_app_id

    spark_logs(tmp_path, planned=3, committed=3)
    write(tmp_path, "aggregates", "jobs.stream", 3)
    write(tmp_path, "arrivals", APP, 9)  # another checkpoint's too: the tables hold the legacy id
    assert checkpoint_app_id(str(tmp_path / "ck"), str(tmp_path / "out")) == "jobs.stream"
