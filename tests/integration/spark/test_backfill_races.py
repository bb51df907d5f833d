"""The late-data backfill against a streaming job writing the same tables: both commit, nothing is lost.

Apart from tests/integration/spark/test_backfill.py so that the test workers run these long tests beside
the others; the backfills looping beside the whole stream are ``test_backfill_races_loop.py``, apart from
this one for the same reason.
"""

import threading
import time
from dataclasses import replace

import pytest
from deltalake import DeltaTable

from jobs.common.tables import DeltaTables
from jobs.stream.run import run_job
from tests.integration.spark.test_backfill import (
    FAR_FUTURE_MS,
    backfill,
    batch_aggregation,
    iot_records,
    job,
    one_partition,
    table_aggregates,
)
from tools.feed.landing import feed

# Minutes each on a 2-core machine running the suite, more on a busy one: a generous timeout (the spark
# fixture hands the next test a working session even if this one is interrupted in a Spark call).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1_800)]


def run_then_land_the_rest(spark, tmp_path, records, first: int, rows_per_file: int):
    """Run the job over the first records, then land the rest in files of ``rows_per_file``.

    Returns the tables' folder and the options of a stream that goes on reading one file per batch.
    """
    inp = tmp_path / "in"
    feed(records.slice(0, first), inp, rows_per_file=500)
    run_job(spark, job(tmp_path))
    feed(records.slice(first), inp, rows_per_file=rows_per_file)
    return tmp_path / "out", replace(job(tmp_path, flush_at_end=True), max_files_per_trigger=1)


def test_a_backfill_racing_the_streaming_job_retries_its_conflict_and_loses_no_commit(spark, tmp_path):
    records = one_partition(iot_records(3_000))
    # The stream goes on with the rest of the input, one file per batch (3), while backfills run: the race
    # needs its first append; the later batches commit beside the nested backfill's MERGE and its retries.
    out, stream_opts = run_then_land_the_rest(spark, tmp_path, records, 1_500, 500)
    assert DeltaTables(str(out), "r").read("late_events").num_rows > 0
    start_version = DeltaTable(str(out / "aggregates")).version()
    worker = threading.Thread(target=run_job, args=(spark, stream_opts), daemon=True)

    nested = []

    def race(attempt):
        # Between the backfill's reads and its MERGE: the stream appends a batch (a blind append, which
        # the MERGE commits beside), and a second backfill commits corrections of the same windows, which
        # this MERGE must not overwrite: they make it recompute.
        if attempt == 1:
            worker.start()
            while DeltaTable(str(out / "aggregates")).version() <= start_version:
                assert worker.is_alive(), "the streaming job ended without committing"
                time.sleep(0.05)
            nested.append(backfill(spark, out, 0, FAR_FUTURE_MS))

    report = backfill(spark, out, 0, FAR_FUTURE_MS, before_commit=race)
    assert nested[0].folded_events > 0
    assert report.attempts >= 2 and "concurrent" in report.conflicts[0], report
    worker.join()  # the stream ends with its input (a hang: the test's timeout)

    # Every batch of the stream is in the tables, and a final backfill makes them exact.
    stream_batches = sum(p.name.isdigit() for p in (tmp_path / "ck" / "query" / "commits").iterdir())
    app_id = (tmp_path / "ck" / "app-id").read_text().strip()
    assert DeltaTables(str(out), app_id).committed_version("aggregates") == stream_batches - 1
    backfill(spark, out, 0, FAR_FUTURE_MS)
    assert table_aggregates(out) == batch_aggregation(spark, records)
