"""Fuzzing the streaming job's source and validation: arbitrary file names, bytes and field values.

    python benchmarks/fuzz_source.py [--examples 200] [--seed 0] [--reader arrow|spark]

Each example lands a few JSON-lines files (names with glob characters, colons, percent signs, spaces,
non-ASCII; lines of arbitrary bytes, invalid UTF-8, records with fuzzed field values, blank lines) and runs
the job over them on a fresh checkpoint. It checks that the job never fails, and that every input record
ends in exactly one table: counted in ``aggregates`` (every window is flushed), a row of ``late_events``, or
a row of ``quarantine`` (a file that cannot be read is one ``quarantine`` row of its own). At the end it
prints what it covered: examples, files, records, the quarantine reasons seen, and the file-name
characters seen. ``tests/system/test_fuzz_source.py`` runs a few examples of the same check in the suite.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import strategies as st  # noqa: E402

BASE = 1_600_000_000_000
#: Characters file names are drawn from: Hadoop glob characters, a colon, URI-special ones, non-ASCII.
NAME_CHARS = "ab1_-. ?*[]{}\\:%#,;=+&@!^'~é€日"


@dataclass(frozen=True)
class LandedFile:
    name: str
    lines: tuple[bytes, ...]


def _names() -> Any:
    body = st.text(alphabet=NAME_CHARS, min_size=0, max_size=10)
    # Spark's file source skips names starting with "." or "_": every name starts with a letter.
    return st.builds(lambda b: "f" + b + ".json", body)


def _text_value() -> Any:
    return st.one_of(
        st.text(max_size=12),
        st.sampled_from(["k", "a", " k ", "", "\ufffd", "é", "\t"]),
        st.none(),
        st.integers(-5, 5),
    )


def _time_value() -> Any:
    return st.one_of(
        st.integers(BASE, BASE + 20_000),
        st.integers(-(2**63), 2**63 - 1),
        st.sampled_from(["2020-09-13T12:26:40Z", "soon", "", " 1600000000000 ", None]),
        st.floats(allow_nan=True, allow_infinity=True),
    )


def _record() -> Any:
    fields = st.fixed_dictionaries(
        {
            "event_id": _text_value(),
            "key": _text_value(),
            "event_time_ms": _time_value(),
        },
        optional={
            "partition": _text_value(),
            "arrival_time_ms": _time_value(),
            "value": st.one_of(st.floats(), st.integers(), st.text(max_size=4), st.none()),
            "extra": st.text(max_size=4),
        },
    )
    return st.builds(lambda d, ascii_: json.dumps(d, ensure_ascii=ascii_).encode(), fields, st.booleans())


def _good() -> Any:
    return st.builds(
        lambda i, te, dtp, key: json.dumps(
            {
                "event_id": f"e{i}",
                "key": key,
                "partition": "p",
                "event_time_ms": te,
                "arrival_time_ms": te + dtp,
                "value": 1.5,
            }  # fmt: skip
        ).encode(),
        st.integers(0, 10**6),
        st.integers(BASE, BASE + 20_000),
        st.integers(0, 3_000),
        st.sampled_from(["k1", "k2", "k3"]),
    )


def _bad_utf8() -> Any:
    # One record a line, as every line strategy here: no line separator in the bytes (a b"\n" in them made
    # the line two for Spark's reader, each quarantined at its own line, and this oracle counted one).
    return st.builds(
        lambda raw, at: b'{"event_id":"u","key":"' + raw + b'","event_time_ms":%d,"value":1}' % (BASE + at),
        st.binary(min_size=1, max_size=4).filter(
            lambda b: not _utf8(b) and not any(c in b for c in (b'"', b"\\", b"\n", b"\r"))
        ),
        st.integers(0, 20_000),
    )


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _line() -> Any:
    raw = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b""))
    return st.one_of(
        _good(), _good(), _record(), _bad_utf8(), raw, st.sampled_from([b"", b" ", b"\t", b"{}"])
    )


def cases() -> Any:
    """A folder of 1-3 landing files (distinct names), each of 0-8 lines."""
    files = st.lists(
        st.builds(LandedFile, _names(), st.lists(_line(), max_size=8).map(tuple)),
        min_size=1,
        max_size=3,
        unique_by=lambda f: f.name,
    )
    return files


def records_in(lines: tuple[bytes, ...]) -> int:
    """Records Spark's JSON Lines reader finds: lines that are not blank (only spaces and tabs)."""
    return sum(1 for line in lines if line.strip(b" \t"))


def land(folder: Path, files: list[LandedFile]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for j, f in enumerate(files):
        path = folder / f.name
        path.write_bytes(b"".join(line + b"\n" for line in f.lines))
        os.utime(path, (1_700_000_000 + j, 1_700_000_000 + j))


@dataclass
class Outcome:
    records: int
    counted: int
    late: int
    quarantined: int
    reasons: Counter[str]


def check(spark: Any, root: Path, files: list[LandedFile], reader: str = "arrow") -> Outcome:
    """Run the job over ``files`` in ``root`` and check that every record ends in exactly one table."""
    from jobs.common.schemas import QUARANTINE_REASONS
    from jobs.common.tables import DeltaTables
    from jobs.stream.run import run_job
    from tests.landing import folder_job
    from watermark.config import PipelineConfig

    land(root / "in", files)
    config = PipelineConfig.from_dict(
        {"version": 1, "strategy": "periodic", "params": {"delay_ms": 500}, "window_ms": 1_000}
    )
    opts = folder_job(root, config, flush_at_end=True, reader=reader)
    run_job(spark, opts)
    tables = DeltaTables(opts.output, "fuzz")

    def rows(name: str, columns: list[str]) -> list[dict[str, Any]]:
        if not (root / "out" / name).exists():
            return []
        return tables.read(name, columns=columns).to_pylist()

    counted = sum(r["count"] for r in rows("aggregates", ["count"]))
    late = rows("late_events", ["file", "line"])
    quarantine = rows("quarantine", ["file", "line", "reason", "raw"])
    unreadable = {f.name for f in files if ":" in f.name}
    expected = sum(records_in(f.lines) for f in files if f.name not in unreadable)
    file_rows = [r for r in quarantine if r["line"] is None]
    record_rows = [r for r in quarantine if r["line"] is not None]
    problems = []
    if counted + len(late) + len(record_rows) != expected:
        problems.append(
            f"{expected} records, but {counted} counted + {len(late)} late + {len(record_rows)} quarantined"
        )
    if sorted(_name(r["file"]) for r in file_rows) != sorted(unreadable):
        problems.append(f"files quarantined as files: {file_rows}, expected {sorted(unreadable)}")
    keys = [(r["file"], r["line"]) for r in [*late, *record_rows]]
    if len(set(keys)) != len(keys):
        problems.append("a record in two rows of late_events/quarantine")
    per_file = {f.name: records_in(f.lines) for f in files}
    for r in [*late, *record_rows]:
        name = _name(r["file"])
        if name not in per_file or not 0 <= r["line"] < per_file[name]:
            problems.append(f"a row naming no record of the input: {r['file']} line {r['line']}")
    for r in quarantine:
        if r["reason"] not in QUARANTINE_REASONS or r["raw"] is None or len(r["raw"].encode()) > 1_100:
            problems.append(f"a quarantine row out of contract: {r}")
    if problems:
        raise AssertionError("; ".join(problems) + f"\nfiles: {files}")
    return Outcome(expected, counted, len(late), len(quarantine), Counter(r["reason"] for r in quarantine))


def _name(uri: str) -> str:
    from jobs.stream.sources.readers import listed_path

    path = listed_path(uri)
    return (path if path is not None else uri).rsplit("/", 1)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reader", choices=["arrow", "spark"], default="arrow")
    args = parser.parse_args()
    from hypothesis import HealthCheck, given, seed, settings

    from jobs.common.session import build_session

    spark = build_session("fuzz-source", master="local[2]", shuffle_partitions=2)
    spark.sparkContext.setLogLevel("ERROR")
    totals: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    chars: Counter[str] = Counter()
    work = Path(tempfile.mkdtemp(prefix="fuzz-source-"))
    started = time.time()

    @seed(args.seed)
    @settings(
        max_examples=args.examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(cases())
    def run(files: list[LandedFile]) -> None:
        root = work / f"case-{totals['examples']}"
        try:
            outcome = check(spark, root, files, args.reader)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        totals["examples"] += 1
        totals["files"] += len(files)
        totals["records"] += outcome.records
        totals["counted"] += outcome.counted
        totals["late"] += outcome.late
        totals["quarantine rows"] += outcome.quarantined
        reasons.update(outcome.reasons)
        chars.update(c for f in files for c in set(f.name) if c in NAME_CHARS and not c.isalnum())

    try:
        run()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.time() - started
    print(f"fuzz_source: {totals['examples']} examples in {elapsed:.0f} s ({args.reader} reader), no failure")
    for name in ("files", "records", "counted", "late", "quarantine rows"):
        print(f"  {name:16} {totals[name]:,}")
    print("  quarantine reasons: " + ", ".join(f"{r} {n}" for r, n in reasons.most_common()))
    print("  name characters:    " + " ".join(f"{c!r}:{n}" for c, n in sorted(chars.items())))


if __name__ == "__main__":
    main()
