"""The Arrow path's spill folders that killed runs left are removed by the next run's workers."""

import fcntl
import os
import time
from dataclasses import replace

import pytest

from jobs.stream.sources.arrow_reader import spill_dir
from jobs.stream.workers import arrow_path
from jobs.stream.workers.arrow_path import Split, collect_pass, hold_spill, sweep_spills
from tests.unit.jobs.stream.workers.test_arrow_path import CHECKS, line


@pytest.fixture(autouse=True)
def _spark_local_dir_given(monkeypatch):
    """The spill folders go under the ``spark.local.dir`` given (``SPARK_LOCAL_DIRS``, which Spark prefers and
    the suite sets for its JVMs, unset here)."""
    monkeypatch.delenv("SPARK_LOCAL_DIRS", raising=False)


def leftover(base, name, age_s, files=("b7-s0.arrow",)):
    """A spill folder as a killed run leaves it: a batch's parsed splits, last touched ``age_s`` ago."""
    folder = base / name
    folder.mkdir(mode=0o700)
    for f in files:
        (folder / f).write_bytes(b"parsed rows")
    then = time.time() - age_s
    for f in files:
        os.utime(folder / f, (then, then))
    os.utime(folder, (then, then))
    return folder


def test_a_sweep_removes_only_the_folders_killed_runs_left(tmp_path):
    base = tmp_path / "local"
    current = spill_dir(str(base))
    killed = leftover(base, "wm-arrow-" + "a" * 32, 3_600)
    recent = leftover(base, "wm-arrow-" + "b" * 32, 5)  # maybe a run that has not locked it yet
    live = leftover(base, "wm-arrow-" + "c" * 32, 3_600)
    other = leftover(base, "spark-" + "d" * 32, 3_600)  # not a spill folder
    fd = os.open(live, os.O_RDONLY | os.O_DIRECTORY)  # a live run's worker holds it
    fcntl.flock(fd, fcntl.LOCK_SH)
    try:
        assert sweep_spills(current) == [killed]
    finally:
        os.close(fd)
    assert not killed.exists() and recent.exists() and live.exists() and other.exists() and current.exists()
    assert sweep_spills(current) == [live]  # its worker is gone (the lock with it)


def test_a_worker_holds_its_runs_folder_and_sweeps_the_others_at_its_first_split(tmp_path):
    path = tmp_path / "in.json"
    path.write_text(
        "".join(
            line(event_id=str(i), key="k", event_time_ms=1_700_000_000_000, arrival_time_ms=1_700_000_000_000)
            + "\n"
            for i in range(5)
        )
    )
    size = path.stat().st_size
    base = tmp_path / "local"
    folder = spill_dir(str(base))
    killed = leftover(base, "wm-arrow-" + "e" * 32, 3_600)
    arrow_path._SWEPT.clear()
    checks = replace(CHECKS, spill=str(folder))
    assert [c.clean for c in collect_pass(iter([Split(0, 0, str(path), 0, size, size)]), checks, "job", 1)]
    assert not killed.exists()
    # This process (a worker of the running job) holds its run's folder: another run cannot sweep it.
    os.utime(folder, (time.time() - 3_600,) * 2)
    for f in folder.iterdir():
        os.utime(f, (time.time() - 3_600,) * 2)
    assert sweep_spills(base / ("wm-arrow-" + "f" * 32)) == []
    assert folder.exists()
    hold_spill(folder)  # held once
    assert list(arrow_path._HELD).count(str(folder)) == 1
