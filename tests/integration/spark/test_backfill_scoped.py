"""The backfill in partition-scoped mode: it folds a late row only once the window's owner has closed it.

In ``partition_mode = "scoped"`` a key's windows fire by the watermark of the partition that owns the key (the
first it arrived in); a row of the key from another partition is late whatever its event time. The
aggregates' highest trigger watermark is then the fastest partition's: a backfill that trusted it inserted
windows the slow owner still had open, and the stream emitted them again (two rows of one window). Here a
fast and a slow partition run through the job, with backfills between the runs (issue 29, item 2).
"""

import dataclasses
from collections import Counter

import pyarrow.compute as pc
import pytest

from jobs.common.tables import DeltaTables
from jobs.stream.run import run_job
from tests.integration.spark.test_backfill import AGGRESSIVE, FAR_FUTURE_MS, backfill, job
from tests.landing import good, write_lines
from watermark.config import PipelineConfig

pytestmark = pytest.mark.slow

# The periodic watermark at the newest event time, each partition on its own arrivals (10 ms period).
SCOPED = PipelineConfig.from_dict(
    {"version": 1, "strategy": "periodic", "params": AGGRESSIVE, "window_ms": 1_000}
    | {"idle_timeout_ms": None, "partition_mode": "scoped"}
)

# (event id, event time, arrival time, key, partition). Key k is owned by "slow" (it arrives there first),
# key j by "fast".
RUN_1 = [
    (0, 100, 10, "k", "slow"),
    (1, 150, 25, "k", "slow"),  # slow's watermark: 150 at most; k's window [0, 1000) is open
    (2, 5_000, 30, "j", "fast"),
    (3, 200, 40, "k", "fast"),  # a foreign row of k: late, its window still open in slow
    (4, 6_000, 50, "j", "fast"),
    (5, 7_000, 60, "j", "fast"),
    (6, 8_000, 70, "j", "fast"),  # fast's watermark past 7000: j's windows fire
]
RUN_2 = [
    (7, 300, 80, "k", "slow"),  # on time in slow: [0, 1000) was open
    (8, 2_500, 90, "k", "slow"),
    (9, 1_500, 95, "k", "fast"),  # foreign, late; its window [1000, 2000) has no on-time row
    (10, 2_600, 100, "k", "slow"),  # slow's watermark at 2500: [0, 1000) and [1000, 2000) close in slow
]
RUN_3 = [(11, 9_000, 110, "j", "fast")]


def land(tmp_path, name, rows):
    write_lines(
        tmp_path / "in" / name, [good(i, te, tp, key=key, part=part) for i, te, tp, key, part in rows]
    )


def run(spark, tmp_path, **kw):
    run_job(spark, dataclasses.replace(job(tmp_path, **kw), config=SCOPED))


def aggregates(out):
    return DeltaTables(str(out), "r").read("aggregates").to_pylist()


def test_a_late_row_waits_until_the_slow_owner_closes_its_window_then_is_folded_once(spark, tmp_path):
    out = tmp_path / "out"
    land(tmp_path, "a.jsonl", RUN_1)
    run(spark, tmp_path)
    late = DeltaTables(str(out), "r").read("late_events")
    assert [(r["key"], r["event_time_ms"], r["partition"]) for r in late.to_pylist()] == [("k", 200, "fast")]
    fired = {(r["key"], r["window_start_ms"]): r["trigger_watermark_ms"] for r in aggregates(out)}
    assert ("k", 0) not in fired, "the slow owner has not closed [0, 1000) yet"
    assert max(fired.values()) >= 1_000, "the fast partition's watermark is past the late row's window"

    first = backfill(spark, out, 0, FAR_FUTURE_MS)
    assert (first.folded_events, first.deferred_events, first.inserted_windows) == (0, 1, 0)
    assert first.lowest_watermark_ms is not None and first.lowest_watermark_ms < 1_000  # the slow partition
    assert ("k", 0) not in {(r["key"], r["window_start_ms"]) for r in aggregates(out)}
    assert not pc.any(DeltaTables(str(out), "r").read("late_events").column("reconciled")).as_py()

    # The slow partition goes on: it closes [0, 1000) and the stream emits it once, with its on-time rows.
    land(tmp_path, "b.jsonl", RUN_2)
    run(spark, tmp_path)
    emitted = [r for r in aggregates(out) if (r["key"], r["window_start_ms"]) == ("k", 0)]
    assert [(r["count"], r["revision"]) for r in emitted] == [(3, 0)]

    second = backfill(spark, out, 0, FAR_FUTURE_MS)
    assert (second.folded_events, second.deferred_events) == (2, 0)
    # [1000, 2000) holds only the foreign row: every partition's watermark has passed it, so it is inserted
    assert second.inserted_windows == 1
    windows = {(r["key"], r["window_start_ms"]): r for r in aggregates(out)}
    k0 = windows[("k", 0)]
    # the stream's row is the window's first version; the fold writes the second (revision counts folds)
    assert (k0["count"], k0["late_count"], k0["revision"], k0["sum"]) == (4, 1, 1, 4.0)
    assert k0["trigger_watermark_ms"] is not None and k0["batch_id"] == emitted[0]["batch_id"]
    k1 = windows[("k", 1_000)]
    assert (k1["count"], k1["late_count"], k1["revision"], k1["trigger_watermark_ms"]) == (1, 1, 1, None)

    # The stream ends (a flush closes the rest); a last backfill has nothing left to fold.
    land(tmp_path, "c.jsonl", RUN_3)
    run(spark, tmp_path, flush_at_end=True)
    third = backfill(spark, out, 0, FAR_FUTURE_MS)
    assert (third.folded_events, third.deferred_events) == (0, 0)
    assert pc.all(DeltaTables(str(out), "r").read("late_events").column("reconciled")).as_py()

    rows = aggregates(out)
    held = Counter((r["key"], r["window_start_ms"]) for r in rows)
    assert max(held.values()) == 1, f"a window has two current rows: {held}"
    landed = Counter((key, te - te % 1_000) for _, te, _, key, _ in RUN_1 + RUN_2 + RUN_3)
    assert {(r["key"], r["window_start_ms"]): r["count"] for r in rows} == dict(landed)
