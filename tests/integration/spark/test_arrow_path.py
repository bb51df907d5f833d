"""The Arrow path in PySpark's Python workers.

Its pure parts: tests/unit/jobs/stream/workers/test_arrow_path.py.
"""

from jobs.stream.sources import arrow_reader
from jobs.stream.sources.arrow_reader import plan_splits
from tests.unit.jobs.stream.workers.test_arrow_path import CHECKS, line


def test_python_workers_leave_the_job_imports_out_of_the_collection_after_each_task(spark, tmp_path):
    # PySpark's daemon collects garbage after every task of a reused worker: the job's imports are frozen
    # there (jobs.stream.workers.frozen_imports), so that collection scans only what a task left.
    path = tmp_path / "f.json"
    rows = [line(event_id=str(i), key="k", event_time_ms=1_700_000_000_000 + i, value=1.0) for i in range(20)]
    path.write_text("\n".join(rows) + "\n")
    splits = plan_splits([str(path)], [path.stat().st_size], 2, min_bytes=1)
    rdd = arrow_reader.splits_rdd(spark, splits)
    assert arrow_reader.run_collect(rdd, splits, CHECKS, str(tmp_path / "ck"), 0).clean

    def frozen(_):
        import gc

        yield gc.get_freeze_count()

    assert max(rdd.mapPartitions(frozen).collect()) > 10_000
