"""The job in keyed mode: each key's windows fire by its own watermark, several keys sharing a partition.

Devices ``a`` and ``b`` share source partition ``p0``; ``b``'s records arrive 2 s after their event times,
``a``'s at once. Judged by the partition's watermark (scoped mode) ``b``'s records are late behind ``a``'s
progress; judged by its own (keyed mode) none is, and every window fires at the instant the library's
keyed replay gives. ``watermark_log`` and ``arrivals`` carry the keys as partitions (what the re-tuning
replays); ``late_events`` keep the source partition.
"""

import numpy as np

from jobs.common.tables import DeltaTables
from jobs.stream.run import run_job
from tests.landing import folder_job, good, land
from tests.samples import BASE_MS as BASE
from watermark.config import PipelineConfig
from watermark.evaluation.replay import WindowSpec, replay

PARAMS = {"delay_ms": 300, "period_ms": 100}  # W = max event time - 300, moved every 100 ms
ROWS = [  # (id, key, event time, arrival time), two landing files, all in partition p0
    [("a0", "a", 2_100, 2_100), ("b0", "b", 200, 2_200), ("a1", "a", 2_600, 2_600), ("b1", "b", 700, 2_700)],
    [
        ("a2", "a", 3_500, 3_500),
        ("b2", "b", 1_500, 3_600),
        ("a3", "a", 4_500, 4_500),
        ("b3", "b", 2_600, 4_700),
    ],
]


def _replay(mode: str):
    _, key, te, tp = zip(*[r for rows in ROWS for r in rows], strict=True)
    return replay([BASE + t for t in te], [BASE + t for t in tp], strategy="periodic", params=PARAMS,
                  window=WindowSpec(1_000), key=key, partition=["p0"] * len(key),
                  partition_mode=mode)  # fmt: skip


def test_keyed_mode_fires_each_keys_windows_by_its_own_watermark_as_the_replay_does(spark, tmp_path):
    scoped, keyed = _replay("scoped"), _replay("keyed")
    assert int(scoped.late.sum()) == 4 and int(keyed.late.sum()) == 0  # what the keyed mode is for
    cfg = PipelineConfig.from_dict(
        {"version": 1, "strategy": "periodic", "params": PARAMS, "window_ms": 1_000}
        | {"partition_mode": "keyed", "idle_timeout_ms": None}
    )
    for n, rows in enumerate(ROWS):
        recs = [good(i, BASE + te, BASE + tp, key=k, part="p0") for i, k, te, tp in rows]
        land(tmp_path / "in", f"f{n}.json", recs, n)
    opts = folder_job(tmp_path, cfg, max_files_per_trigger=1)
    assert len(run_job(spark, opts)) == 2
    tables = DeltaTables(opts.output, "r")
    agg = tables.read("aggregates").to_pylist()
    got = {(r["key"], r["window_start_ms"]): (r["fire_arrival_ms"], r["trigger_watermark_ms"]) for r in agg}
    w = keyed.windows
    want = {
        (str(np.asarray(keyed.keys)[k]), int(s)): (int(t), int(m))
        for k, s, f, t, m in zip(w.key, w.start_ms, w.fired, w.fire_tp_ms, w.fire_wm_ms, strict=True)
        if f
    }
    assert ("b", BASE) in want and ("a", BASE + 2_000) in want
    assert got == want
    assert tables.read("late_events").num_rows == 0
    log = tables.read("watermark_log").to_pylist()
    assert {r["partition"] for r in log} == {"a", "b"}
    b_marks = [r["partition_watermark_ms"] for r in log if r["partition"] == "b"]
    a_marks = [r["partition_watermark_ms"] for r in log if r["partition"] == "a"]
    assert BASE < max(b_marks) <= BASE + 2_600 - 300 < max(a_marks)  # b's own watermark, behind a's
    arrivals = tables.read("arrivals").to_pylist()
    assert sorted(r["partition"] for r in arrivals) == ["a"] * 4 + ["b"] * 4
