"""Backfills looping beside the whole stream, each racing the batches that commit meanwhile: all commit,
nothing is lost. (One backfill racing the stream and retrying its conflict: ``test_backfill_races.py``.)
"""

import json
import threading

import pytest

from jobs.common.tables import DeltaTables
from jobs.stream.run import run_job
from tests.integration.spark.test_backfill import (
    FAR_FUTURE_MS,
    backfill,
    batch_aggregation,
    iot_records,
    one_partition,
    table_aggregates,
)
from tests.integration.spark.test_backfill_races import run_then_land_the_rest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1_800)]


def merge_commits(table) -> list[dict]:
    """The commitInfo of every MERGE in ``table``'s Delta log, with its version."""
    out = []
    for f in sorted((table / "_delta_log").glob("*.json")):
        for line in f.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            if info and info.get("operation") == "MERGE":
                out.append(info | {"version": int(f.stem)})
    return out


def test_backfills_and_the_streaming_appends_running_at_the_same_time_all_commit(spark, tmp_path):
    # 4 more batches of 250 rows after the first 1,000: the backfills loop beside the whole stream, each
    # racing the batches that commit meanwhile (4 batches, not 12: a folding backfill takes as long as
    # several batches, so the first already spans the stream's appends).
    records = one_partition(iot_records(2_000))
    out, stream_opts = run_then_land_the_rest(spark, tmp_path, records, 1_000, 250)
    worker = threading.Thread(target=run_job, args=(spark, stream_opts), daemon=True)
    worker.start()
    reports = []
    while worker.is_alive():
        reports.append(backfill(spark, out, 0, FAR_FUTURE_MS))
    worker.join()
    reports.append(backfill(spark, out, 0, FAR_FUTURE_MS))

    # Every stream batch committed, every backfill committed its MERGEs, and nothing was lost.
    stream_batches = sum(p.name.isdigit() for p in (tmp_path / "ck" / "query" / "commits").iterdir())
    app_id = (tmp_path / "ck" / "app-id").read_text().strip()
    assert DeltaTables(str(out), app_id).committed_version("aggregates") == stream_batches - 1
    merges = merge_commits(out / "aggregates")
    assert len(merges) >= 2 and sum(r.folded_events > 0 for r in reports) == len(merges)
    assert all(json.loads(m["userMetadata"])["awm.backfill.interval"] for m in merges)
    assert "Delta-Lake" in merges[0]["engineInfo"]
    assert table_aggregates(out) == batch_aggregation(spark, records)
