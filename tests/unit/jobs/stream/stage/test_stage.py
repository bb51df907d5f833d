"""The driver side of the watermark stage: arrival order, labels, and the compressed lateness thresholds."""

from pathlib import Path

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from jobs.stream.stage.driver import arrival_order, label_thresholds, run_stage
from watermark.evaluation.replay import WindowSpec, replay
from watermark.partitions.combine import PartitionedWatermark


def narrow(partition, te, tp, file, line):
    return pa.table(
        {"partition": partition, "event_time_ms": te, "arrival_time_ms": tp, "file": file, "line": line}
    )


def test_arrival_order_is_time_then_file_then_line():
    t = narrow(["p"] * 4, [1, 2, 3, 4], [10, 10, 5, 10], ["b", "a", "z", "a"], [0, 7, 3, 2])
    assert arrival_order(t).tolist() == [2, 3, 1, 0]


def test_arrival_order_takes_integer_file_indices_as_ranks():
    # The job collects the index of each file in the batch's sorted paths: 10 comes after 2.
    t = pa.table({"arrival_time_ms": [5, 5, 5], "file": pa.array([10, 2, 2], pa.int32()), "line": [0, 7, 3]})
    assert arrival_order(t).tolist() == [2, 1, 0]


def test_stage_labels_equal_the_replay_on_the_same_rows_in_any_row_order():
    rng = np.random.default_rng(2)
    n = 2_000
    tp = np.sort(rng.integers(0, 20_000, n)).astype(np.int64)
    te = tp - rng.integers(0, 500, n)
    part = rng.choice(["a", "b", "c"], n)
    files = np.array([f"f{i // 100:03d}" for i in range(n)])
    lines = np.array([i % 100 for i in range(n)])
    shuffle = rng.permutation(n)
    table = narrow(part[shuffle], te[shuffle], tp[shuffle], files[shuffle], lines[shuffle])
    result = run_stage(PartitionedWatermark("periodic", {"delay_ms": 200, "period_ms": 100}), table, 500)
    expected = replay(
        te,
        tp,
        strategy="periodic",
        params={"delay_ms": 200, "period_ms": 100},
        window=WindowSpec(1_000),
        partition=part,
    )
    assert sorted(shuffle[result.late].tolist()) == expected.late_rows.tolist()


@given(data=st.data())
def test_thresholds_reproduce_every_label(data):
    n = data.draw(st.integers(0, 80))
    te = np.array(data.draw(st.lists(st.integers(0, 50), min_size=n, max_size=n)), np.int64)
    wm = np.sort(np.array(data.draw(st.lists(st.integers(0, 50), min_size=n, max_size=n)), np.int64))
    late = te < wm
    for t in (label_thresholds(te, late), label_thresholds(te, late, wm)):
        piece = np.searchsorted(t.starts, np.arange(n), side="right") - 1
        assert np.array_equal(te < t.values[piece], late)
    t = label_thresholds(te, late, wm)
    # never more pieces than the watermark has distinct values
    assert t.starts.size <= max(1, np.unique(wm).size) if n else t.starts.size == 0


def test_the_stage_store_keeps_a_bounded_number_of_files_however_many_batches_run(tmp_path):
    from jobs.common.windows import empty_partials
    from jobs.stream.checkpoint.state import StageStore
    from watermark.config import PipelineConfig
    from watermark.partitions.combine import PartitionedWatermark

    config = PipelineConfig.from_dict({"version": 1, "strategy": "periodic", "window_ms": 1_000})
    store = StageStore(str(tmp_path))
    pw = PartitionedWatermark("periodic", idle_timeout_ms=config.idle_timeout_ms)  # the state's own config
    counts = []
    for batch in range(40):
        store.batch_meta(batch, config)
        pw.process(["p"], [1_000 * batch], [1_000 * batch])
        store.save(batch, pw, empty_partials(), 1)
        counts.append(sum(1 for _ in Path(store.root.key).rglob("*")))
    assert counts[-1] == counts[10] <= 5 * StageStore.keep  # per state: a folder, 2 files, a manifest, a meta
    # What a restart needs stays: the newest state and the meta of every batch after the oldest kept one.
    assert store.latest_batch() == 39 and store.load_before(40) is not None
    assert store.batch_meta(39, config)[1] == config
    assert (Path(store.root.key) / "batch-000000000037.json").exists()
