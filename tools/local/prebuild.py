"""What the set-up builds once, so that no run pays for it: Spark's class archive and numba's kernels.

``python -m tools.local.prebuild`` (``bin/bootstrap.sh`` runs it after the virtualenv and the jars) makes
both when missing or stale and says what it did; a second run finds both and returns at once.

- **The class archive.** A Spark JVM spends seconds of CPU loading and verifying the same thousands of
  classes of PySpark's jars (Spark, Scala, Hadoop); with ``-XX:SharedArchiveFile`` it maps them from an
  archive made once by a JVM that loaded them (``-XX:ArchiveClassesAtExit``, JDK 13 and later). A job of 8
  micro-batches used 22 s of CPU instead of 29. It is made by the job itself on a few hundred records
  (about half a minute), under ``out/jvm-cds/``, keyed by the JDK and the jars' names, sizes and times, and
  replaced when they change. The test suite's JVMs use it (``tests/conftest.py``); a JVM whose class path
  differs (the cluster's executors, the Kafka broker) or a stale archive is ignored by the JVM, silently
  (``-Xlog:cds*=off``); classes of ``spark.jars`` (Delta, the Kafka source) are never archived.
- **numba's kernels** (``watermark/strategies/*_kernel.py``: the ``slo`` and ``fleet`` strategies' rules) are
  compiled with ``cache=True``: the first process to use them writes them to
  ``watermark/strategies/__pycache__``, and every later one loads them in milliseconds. A replay of each
  strategy that uses them, in every partition mode, on a small synthetic stream, compiles the signatures
  the job, the replays and the tuner use.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Where the class archives live (git-ignored, like the jars of .jvm/).
CLASS_ARCHIVES = ROOT / "out" / "jvm-cds"
#: The JVM options the archive is made and used with: C1 only, as the test suite's JVMs run.
C1_ONLY = "-XX:TieredStopAtLevel=1"


def class_archive_path() -> Path | None:
    """Where the archive for this JDK and PySpark's jars is (made or not), or None without Java or PySpark."""
    try:
        import pyspark
    except ImportError:
        return None
    java_home = os.environ.get("JAVA_HOME")  # the java Spark's launcher runs (bin/spark-class)
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if java is None or not Path(java).exists():
        return None
    jvm = Path(os.path.realpath(java)).parents[1] / "lib" / "server" / "libjvm.so"
    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    if not jars or not jvm.exists():
        return None
    stats = [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in [jvm, *jars]]
    key = hashlib.sha256(repr((str(jvm), stats)).encode()).hexdigest()[:16]
    return CLASS_ARCHIVES / f"spark-{key}.jsa"


def ready_class_archive() -> Path | None:
    """The archive if it is made (the set-up makes it), else None."""
    path = class_archive_path()
    return path if path is not None and path.exists() else None


#: The archive's maker, run as its own process: the job on a few files (its JVM writes the archive as it
#: exits), then the archive renamed into place if the job succeeded.
_MAKE_CLASS_ARCHIVE = """
import os, shutil, sys, tempfile
from pyspark import SparkContext
from jobs.stream.cli import main
from tools.feed.landing import feed
from tools.feed.records import records_from_synthetic
partial, archive = sys.argv[1:]
work = tempfile.mkdtemp(prefix="awm-cds-")
try:
    feed(records_from_synthetic(600), os.path.join(work, "in"), rows_per_file=200)
    flags = ["--input", os.path.join(work, "in"), "--max-files-per-trigger", "1", "--flush-at-end"]
    flags += ["--output", os.path.join(work, "out"), "--checkpoint", os.path.join(work, "ck")]
    status = main([*flags, "--metrics-port", "0"])
    jvm = SparkContext._gateway.proc  # spark-submit exec'd java: closing its input ends it, and it writes
    jvm.stdin.close()
    jvm.wait(timeout=600)
    if status == 0 and os.path.getsize(partial) > 0:
        os.replace(partial, archive)
        sys.exit(0)
    sys.exit(1)
finally:
    shutil.rmtree(work, ignore_errors=True)
    if os.path.exists(partial):
        os.remove(partial)
"""


def make_class_archive() -> str:
    """Make the archive if it is missing (stale ones removed); returns what was done."""
    archive = class_archive_path()
    if archive is None:
        return "class archive: no Java or PySpark, skipped"
    if archive.exists():
        return f"class archive: {archive.relative_to(ROOT)} is ready"
    CLASS_ARCHIVES.mkdir(parents=True, exist_ok=True)
    for old in CLASS_ARCHIVES.glob("spark-*"):
        old.unlink(missing_ok=True)
    partial = archive.with_name(f"{archive.stem}.{os.getpid()}.partial")
    env = os.environ | {
        "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        "PYTHONPATH": str(ROOT),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_SUBMIT_OPTS": f"{C1_ONLY} -XX:ArchiveClassesAtExit={partial}",
        "SPARK_LOCAL_DIRS": tempfile.mkdtemp(prefix="awm-cds-scratch-"),
    }
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", _MAKE_CLASS_ARCHIVE, str(partial), str(archive)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    shutil.rmtree(env["SPARK_LOCAL_DIRS"], ignore_errors=True)
    if proc.returncode != 0 or not archive.exists():
        tail = (proc.stderr or "").strip().splitlines()[-5:]
        return "class archive: not made (the JVMs run without it): " + " | ".join(tail)
    size = archive.stat().st_size / 1e6
    return (
        f"class archive: made {archive.relative_to(ROOT)} ({size:.0f} MB, {time.monotonic() - started:.0f} s)"
    )


def compile_kernels() -> str:
    """Compile and cache the kernels: each numba strategy's vectorised core and its update loop."""
    import numpy as np

    from watermark.evaluation.replay import PARTITION_MODES, replay
    from watermark.strategies.registry import make
    from watermark.windowspec import WindowSpec

    started = time.monotonic()
    rng = np.random.default_rng(0)
    n = 2_000
    tp = np.cumsum(rng.integers(1, 40, n)).astype(np.int64) + 1_700_000_000_000
    te = tp - rng.exponential(300, n).astype(np.int64)
    partition = rng.integers(0, 3, n).astype(np.int64)
    later = rng.exponential(5_000, n - n // 2).astype(np.int64)
    shifted = tp - np.concatenate([tp[: n // 2] - te[: n // 2], later])  # the delays change halfway
    key = partition * 2 + rng.integers(0, 2, n).astype(np.int64)  # each key in one partition (scoped, keyed)
    for strategy in ("slo", "fleet"):
        for mode in PARTITION_MODES:
            replay(
                te, tp, strategy=strategy, params={"late_slo_pct": 0.5}, window=WindowSpec(1_000),
                partition=partition, key=key,
                partition_mode=mode, idle_timeout_ms=5_000,
            )  # fmt: skip
        # and the tuple-by-tuple path (short runs, the job's small batches, idle time): kernels of its own
        generator = make(strategy, {"late_slo_pct": 0.5})
        for a, b in zip(shifted.tolist(), tp.tolist(), strict=True):
            generator.update(a, b)
        generator.on_idle(int(tp[-1]) + 60_000)
    took = time.monotonic() - started
    return f"numba kernels: compiled or loaded from watermark/strategies/__pycache__ ({took:.0f} s)"


def main() -> int:
    """Compile the kernels and make the class archive, each only if missing; say what was done.

    Side by side: the archive is made by a JVM of its own (a thread here waits on it) while this process
    compiles the kernels, one core each (on 2 cores about 30 s of the set-up's wall time less than one
    after the other).
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="class-archive") as pool:
        archive = pool.submit(make_class_archive)
        print("[setup] " + compile_kernels(), file=sys.stderr)
        print("[setup] " + archive.result(), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
