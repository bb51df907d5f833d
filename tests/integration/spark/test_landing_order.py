"""Landing files are read in (modification time, name) order: files of one mtime arrive by name."""

import json
import os

from jobs.common.tables import DeltaTables
from jobs.stream.run import run_job
from tests.landing import folder_job
from watermark.config import PipelineConfig

BASE = 1_600_000_000_000
ARRIVAL = BASE + 100_000  # every record arrives at the same time: only the file order tells them apart
#: File -> event times. A per-tuple watermark (``te - delay``) after c's records makes a's and b's late.
FILES = {"a.jsonl": 10_000, "b.jsonl": 20_000, "c.jsonl": 30_000}


def land(folder, mtimes):
    """Write the files in reverse name order (so listing order is no help) with the given mtimes (s)."""
    folder.mkdir(parents=True)
    for name in sorted(FILES, reverse=True):
        lines = [
            json.dumps(
                {
                    "event_id": f"{name}-{i}",
                    "key": "k",
                    "partition": "p",
                    "event_time_ms": BASE + FILES[name] + i,
                    "arrival_time_ms": ARRIVAL,
                    "value": 1.0,
                }
            )
            for i in range(5)
        ]
        path = folder / name
        path.write_text("".join(line + "\n" for line in lines))
        os.utime(path, (mtimes[name], mtimes[name]))


def run(spark, tmp, mtimes):
    land(tmp / "in", mtimes)
    config = PipelineConfig.from_dict(
        {"version": 1, "strategy": "sliding", "params": {"initial_delay_ms": 100}, "window_ms": 1_000}
    )
    opts = folder_job(tmp, config, flush_at_end=True)
    (report,) = run_job(spark, opts)
    tables = DeltaTables(opts.output, "test-reader")
    late = sorted(
        (os.path.basename(r["file"]), r["line"], r["event_id"])
        for r in tables.read("late_events", columns=["file", "line", "event_id"]).to_pylist()
    )
    windows = sorted(
        (r["window_start_ms"], r["count"])
        for r in tables.read("aggregates", columns=["window_start_ms", "count"]).to_pylist()
    )
    return report.late, late, windows


def test_files_of_one_modification_time_arrive_by_name_like_files_of_increasing_times(spark, tmp_path):
    same = run(spark, tmp_path, dict.fromkeys(FILES, 1_700_000_000))
    # What files of increasing times (a, then b, then c) give: their event times grow with the order, so
    # nothing is late and each file's 5 records make one window. Any other order makes a file named before
    # one read ahead of it late (the next test), so these tables say the files were read a, b, c.
    increasing = (0, [], [(BASE + te, 5) for te in FILES.values()])
    assert same == increasing


def test_the_modification_time_comes_before_the_name(spark, tmp_path):
    decreasing = {"a.jsonl": 1_700_000_002, "b.jsonl": 1_700_000_001, "c.jsonl": 1_700_000_000}
    n_late, late, windows = run(spark, tmp_path, decreasing)
    # c landed first, then b, then a: the watermark after c's records makes every record of b and a late,
    # each named by its file and its record number there.
    assert n_late == 10
    assert late == [(name, i, f"{name}-{i}") for name in ("a.jsonl", "b.jsonl") for i in range(5)]
    assert sum(count for _, count in windows) == 5
