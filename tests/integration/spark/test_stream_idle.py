"""The job in partition-scoped mode: a device that stops still gets its last window into the aggregates.

Device ``b`` sends once and stops; ``a`` goes on. With an idle timeout ``b``'s watermark follows ``a``'s once
``b`` is idle, up to the end of ``b``'s last window, so ``b``'s window fires, in the batch after the one
``b`` spoke in, at the instant the library replay gives (:mod:`watermark.partitions.combine`, scoped
idleness).
"""

import numpy as np

from jobs.common.tables import DeltaTables
from jobs.stream.run import run_job
from tests.landing import folder_job, good, land
from tests.samples import BASE_MS as BASE
from watermark.config import PipelineConfig
from watermark.evaluation.replay import WindowSpec, replay

PARAMS = {"max_event_time_lag_ms": 300, "max_watermark_lag_ms": 1_000_000}
ROWS = [  # (id, partition = key, event time, arrival time), two landing files
    [("b0", "b", BASE + 100, BASE + 100), ("a0", "a", BASE + 500, BASE + 500)],
    [("a1", "a", BASE + 1_500, BASE + 1_500), ("a2", "a", BASE + 2_500, BASE + 2_500)],
]


def test_a_stopped_partitions_last_window_reaches_the_aggregates_at_the_replays_instant(spark, tmp_path):
    cfg = PipelineConfig.from_dict(
        {"version": 1, "strategy": "ingestion", "params": PARAMS, "window_ms": 1_000}
        | {"partition_mode": "scoped", "idle_timeout_ms": 2_000}
    )
    for n, rows in enumerate(ROWS):
        land(tmp_path / "in", f"f{n}.json", [good(i, te, tp, key=p, part=p) for i, p, te, tp in rows], n)
    opts = folder_job(tmp_path, cfg, max_files_per_trigger=1)
    assert len(run_job(spark, opts)) == 2
    agg = DeltaTables(opts.output, "r").read("aggregates").to_pylist()
    got = {(r["key"], r["window_start_ms"]): (r["fire_arrival_ms"], r["trigger_watermark_ms"]) for r in agg}
    _, part, te, tp = zip(*[r for rows in ROWS for r in rows], strict=True)
    r = replay(te, tp, strategy="ingestion", params=PARAMS, window=WindowSpec(1_000), key=part,
               partition=part, partition_mode="scoped", idle_timeout_ms=2_000)  # fmt: skip
    w = r.windows
    want = {
        (str(np.asarray(r.keys)[k]), int(s)): (int(t), int(m))
        for k, s, f, t, m in zip(w.key, w.start_ms, w.fired, w.fire_tp_ms, w.fire_wm_ms, strict=True)
        if f
    }
    # b idle from BASE + 2100, when a's watermark is BASE + 1500 - 1 - 300, past b's [0, 1000): b is raised
    # to that window's end (no further) and the window closes then.
    assert want[("b", BASE)] == (BASE + 2_100, BASE + 1_000)
    assert got == want
