"""Deferred tables' pending rows in the checkpoint: when they are due, a put killed half way, the policy
(committed exactly once through delta-spark: tests/integration/spark/test_deferred.py)."""

import pyarrow as pa
import pyarrow.parquet  # noqa: F401 (pa.parquet)
import pytest

from jobs.common.schemas import ARRIVALS_SCHEMA
from jobs.stream.checkpoint.state import CheckpointError
from jobs.stream.options import DeferPolicy
from jobs.stream.sinks.deferred import PendingRows
from tests.samples import BASE_MS as BASE


def arrivals(batch_id, n, start=0):
    return pa.table(
        {
            "partition": ["p"] * n,
            "event_time_ms": [BASE + start + i for i in range(n)],
            "arrival_time_ms": [BASE + start + i for i in range(n)],
            "batch_id": [batch_id] * n,
            "ingested_at_ms": [BASE] * n,
        },
        schema=ARRIVALS_SCHEMA,
    )


def test_commits_are_due_every_n_batches_or_when_the_oldest_waited_long_enough(tmp_path):
    pending = PendingRows(str(tmp_path / "ck"))
    policy = DeferPolicy(batches=3, max_delay_ms=10_000)
    pending.put(0, BASE, {"arrivals": arrivals(0, 1)})
    pending.put(1, BASE + 1_000, {"arrivals": arrivals(1, 1)})
    assert not pending.due(1, BASE + 1_000, policy)
    pending.put(2, BASE + 2_000, {})
    assert pending.due(2, BASE + 2_000, policy)
    pending.remove(2)
    pending.put(3, BASE + 20_000, {"arrivals": arrivals(3, 1)})
    assert not pending.due(3, BASE + 20_000, policy)
    pending.put(4, BASE + 30_000, {"arrivals": arrivals(4, 1)})
    assert pending.due(4, BASE + 30_000, policy)  # 10 s since batch 3's ingestion


def test_a_put_killed_before_its_meta_is_discarded_and_a_damaged_one_is_refused(tmp_path):
    ck = tmp_path / "ck"
    pending = PendingRows(str(ck))
    pending.put(0, BASE, {"arrivals": arrivals(0, 1)})
    root = ck / "stage" / "pending"
    half = root / "batch-000000000001"  # killed after its rows, before meta.json (written last)
    half.mkdir()
    (half / "arrivals.parquet").write_bytes(b"partial")
    assert [p.batch_id for p in pending.batches()] == [0]  # never taken for complete
    older = root / ".batch-000000000002.tmp"  # what a put of the previous version left
    older.mkdir()
    pending = PendingRows(str(ck))
    assert not half.exists() and not older.exists()
    assert [p.batch_id for p in pending.batches()] == [0]
    (root / "batch-000000000000" / "meta.json").write_text("{trunc")
    with pytest.raises(CheckpointError, match="meta.json: unreadable pending rows"):
        PendingRows(str(ck)).batches()  # a restart reads it (this run knows what it wrote)


def test_a_put_of_a_batch_run_again_replaces_its_rows(tmp_path):
    ck = tmp_path / "ck"
    pending = PendingRows(str(ck))
    pending.put(0, BASE, {"arrivals": arrivals(0, 3)})
    pending.put(0, BASE, {"arrivals": arrivals(0, 2)})
    folder = ck / "stage" / "pending" / "batch-000000000000"
    assert sorted(p.name for p in folder.iterdir()) == ["arrivals.parquet", "meta.json"]
    assert pa.parquet.read_table(folder / "arrivals.parquet").num_rows == 2


def test_policy_refuses_out_of_range_values():
    with pytest.raises(ValueError, match="--defer-batches must be between 1 and 10000"):
        DeferPolicy(batches=0)
    with pytest.raises(ValueError, match="--defer-max-delay-ms"):
        DeferPolicy(max_delay_ms=-1)
