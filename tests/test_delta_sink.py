import threading

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError

from jobs.delta_sink import DeltaSink

SCHEMA = pa.schema([pa.field("key", pa.string()), pa.field("n", pa.int64()), pa.field("x", pa.float64())])


def rows(*triples: tuple[str, int, float]) -> pa.Table:
    keys, ns, xs = zip(*triples, strict=True) if triples else ((), (), ())
    return pa.table({"key": list(keys), "n": list(ns), "x": list(xs)}, schema=SCHEMA)


def delta_version(sink: DeltaSink, table: str) -> int:
    return DeltaTable(sink.path(table)).version()


def sorted_rows(table: pa.Table) -> list[dict[str, object]]:
    return sorted(table.to_pylist(), key=lambda r: (r["key"], r["n"]))


def test_first_append_creates_table_with_schema(tmp_path):
    sink = DeltaSink(tmp_path, "app")
    assert not sink.exists("agg")
    assert sink.committed_version("agg") is None
    data = rows(("a", 1, 0.5), ("b", 2, 1.5))

    assert sink.append("agg", data, 0, schema=SCHEMA) is True

    assert sink.exists("agg")
    assert sink.path("agg") == str(tmp_path / "agg")
    assert (tmp_path / "agg" / "_delta_log").is_dir()
    got = sink.read("agg")
    assert got.schema == SCHEMA
    assert sorted_rows(got) == data.to_pylist()
    assert sink.committed_version("agg") == 0
    assert delta_version(sink, "agg") == 1  # version 0 creates the table, version 1 is the batch


def test_replay_of_same_or_lower_batch_is_skipped(tmp_path):
    sink = DeltaSink(tmp_path, "app")
    assert sink.append("agg", rows(("a", 1, 0.0)), 4, schema=SCHEMA)
    before_rows, before_version = sink.read("agg").num_rows, delta_version(sink, "agg")

    assert sink.append("agg", rows(("a", 1, 0.0)), 4, schema=SCHEMA) is False
    assert sink.append("agg", rows(("zzz", 9, 9.0)), 3, schema=SCHEMA) is False
    assert sink.append("agg", rows(("zzz", 9, 9.0)), 0, schema=SCHEMA) is False

    assert sink.read("agg").num_rows == before_rows == 1
    assert delta_version(sink, "agg") == before_version
    assert sink.committed_version("agg") == 4


def test_higher_batch_appends(tmp_path):
    sink = DeltaSink(tmp_path, "app")
    assert sink.append("agg", rows(("a", 1, 0.0)), 0, schema=SCHEMA)
    assert sink.append("agg", rows(("b", 2, 1.0), ("c", 3, 2.0)), 1, schema=SCHEMA)
    assert sink.committed_version("agg") == 1
    assert sink.append("agg", rows(("d", 4, 3.0)), 7, schema=SCHEMA)  # gaps are fine
    assert sink.committed_version("agg") == 7
    assert delta_version(sink, "agg") == 3
    assert [r["key"] for r in sorted_rows(sink.read("agg"))] == ["a", "b", "c", "d"]


def test_app_ids_are_independent(tmp_path):
    one, two = DeltaSink(tmp_path, "one"), DeltaSink(tmp_path, "two")
    assert one.append("agg", rows(("a", 1, 0.0)), 5, schema=SCHEMA)
    assert two.committed_version("agg") is None
    assert two.append("agg", rows(("b", 2, 0.0)), 0, schema=SCHEMA)  # lower id, other app: written
    assert two.append("agg", rows(("b", 2, 0.0)), 0, schema=SCHEMA) is False
    assert one.append("agg", rows(("a", 1, 0.0)), 5, schema=SCHEMA) is False
    assert (one.committed_version("agg"), two.committed_version("agg")) == (5, 0)
    assert [r["key"] for r in sorted_rows(one.read("agg"))] == ["a", "b"]


def test_empty_batch_creates_table_and_records_transaction(tmp_path):
    sink = DeltaSink(tmp_path, "app")
    assert sink.append("late", SCHEMA.empty_table(), 0, schema=SCHEMA) is True

    assert sink.exists("late")
    got = sink.read("late")
    assert got.num_rows == 0
    assert got.schema == SCHEMA
    assert sink.committed_version("late") == 0
    assert delta_version(sink, "late") == 1

    # A replay of the empty batch is skipped, even with rows this time.
    assert sink.append("late", rows(("a", 1, 0.0)), 0, schema=SCHEMA) is False
    # An empty batch on an existing table still makes a commit carrying the txn.
    assert sink.append("late", SCHEMA.empty_table(), 1, schema=SCHEMA) is True
    assert delta_version(sink, "late") == 2
    assert sink.committed_version("late") == 1
    assert sink.append("late", SCHEMA.empty_table(), 1, schema=SCHEMA) is False
    assert delta_version(sink, "late") == 2
    assert sink.read("late").num_rows == 0


def test_data_is_cast_and_reordered_to_schema(tmp_path):
    sink = DeltaSink(tmp_path, "app")
    data = pa.table(
        {
            "x": pa.array([1.5], pa.float32()),
            "n": pa.array([7], pa.int32()),
            "key": pa.array(["k"], pa.large_string()),
        }
    )
    assert sink.append("agg", data, 0, schema=SCHEMA)
    got = sink.read("agg")
    assert got.schema == SCHEMA
    assert got.to_pylist() == [{"key": "k", "n": 7, "x": 1.5}]


def test_missing_column_raises_naming_it(tmp_path):
    sink = DeltaSink(tmp_path, "app")
    with pytest.raises(ValueError, match=r"missing column\(s\) 'x'"):
        sink.append("agg", pa.table({"key": ["a"], "n": [1]}), 0, schema=SCHEMA)
    assert not sink.exists("agg")


def test_extra_column_raises_naming_it(tmp_path):
    sink = DeltaSink(tmp_path, "app")
    data = rows(("a", 1, 0.0)).append_column("surprise", pa.array([True]))
    with pytest.raises(ValueError, match=r"unexpected column\(s\) 'surprise'"):
        sink.append("agg", data, 0, schema=SCHEMA)
    assert not sink.exists("agg")


def test_uncastable_value_raises_value_error(tmp_path):
    sink = DeltaSink(tmp_path, "app")
    with pytest.raises(ValueError):
        sink.append("agg", pa.table({"key": ["a"], "n": ["not a number"], "x": [0.0]}), 0, schema=SCHEMA)


@pytest.mark.parametrize("bad", [-1, -100])
def test_negative_batch_id_raises(tmp_path, bad):
    sink = DeltaSink(tmp_path, "app")
    with pytest.raises(ValueError, match="batch_id"):
        sink.append("agg", rows(("a", 1, 0.0)), bad, schema=SCHEMA)
    assert not sink.exists("agg")


@pytest.mark.parametrize("bad", [1.0, "1", True, None])
def test_non_int_batch_id_raises(tmp_path, bad):
    with pytest.raises(TypeError, match="batch_id"):
        DeltaSink(tmp_path, "app").append("agg", rows(("a", 1, 0.0)), bad, schema=SCHEMA)


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b"])
def test_bad_table_name_raises(tmp_path, bad):
    with pytest.raises(ValueError, match="table"):
        DeltaSink(tmp_path, "app").path(bad)


def test_read_missing_table_raises_file_not_found(tmp_path):
    sink = DeltaSink(tmp_path, "app")
    with pytest.raises(FileNotFoundError, match="'nope' does not exist"):
        sink.read("nope")
    (tmp_path / "plain").mkdir()  # a directory that is not a Delta table
    assert not sink.exists("plain")
    assert sink.committed_version("plain") is None
    with pytest.raises(FileNotFoundError):
        sink.read("plain")


def test_crash_between_tables_replays_only_missing_table(tmp_path):
    sink = DeltaSink(tmp_path, "job")
    batch = {"a": rows(("a", 3, 0.0)), "b": rows(("b", 3, 0.0))}
    for table in ("a", "b"):
        assert sink.append(table, rows((table, 2, 0.0)), 2, schema=SCHEMA)
    assert sink.append("a", batch["a"], 3, schema=SCHEMA)
    # ... crash before table "b"; the restarted job replays batch 3 on both tables.
    a_version = delta_version(sink, "a")
    restarted = DeltaSink(tmp_path, "job")
    written = {table: restarted.append(table, batch[table], 3, schema=SCHEMA) for table in ("a", "b")}

    assert written == {"a": False, "b": True}
    assert delta_version(sink, "a") == a_version
    for table in ("a", "b"):
        assert restarted.committed_version(table) == 3
        assert [r["n"] for r in sorted_rows(restarted.read(table))] == [2, 3]


def test_schema_mismatch_with_existing_table_is_reported_not_retried(tmp_path):
    sink = DeltaSink(tmp_path, "app")
    assert sink.append("agg", rows(("a", 1, 0.0)), 0, schema=SCHEMA)
    other = pa.schema([pa.field("key", pa.string())])
    with pytest.raises(Exception, match="(?i)schema") as info:
        sink.append("agg", pa.table({"key": ["z"]}), 1, schema=other)
    assert not isinstance(info.value, CommitFailedError)
    assert sink.committed_version("agg") == 0


def _run_threads(target, n):
    errors = []
    start = threading.Barrier(n)

    def run(i):
        try:
            start.wait()
            target(i)
        except BaseException as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []


def test_concurrent_writers_lose_no_commit(tmp_path):
    """4 apps append 10 batches each to one table (created concurrently, too)."""
    n_threads, n_batches = 4, 10

    def writer(i):
        sink = DeltaSink(tmp_path, f"app-{i}", max_retries=20, backoff_base=0.005, backoff_max=0.1)
        for b in range(n_batches):
            assert sink.append("agg", rows((f"app-{i}", b, float(i))), b, schema=SCHEMA)

    _run_threads(writer, n_threads)

    sink = DeltaSink(tmp_path, "reader")
    got = sorted_rows(sink.read("agg"))
    assert got == sorted_rows(
        rows(*[(f"app-{i}", b, float(i)) for i in range(n_threads) for b in range(n_batches)])
    )
    for i in range(n_threads):
        assert DeltaSink(tmp_path, f"app-{i}").committed_version("agg") == n_batches - 1


def test_concurrent_replays_of_same_app_write_each_batch_once(tmp_path):
    """4 copies of the same job (same app id) race through the same 10 batches: each lands once."""
    n_threads, n_batches = 4, 10
    written = [0] * n_threads

    def replayer(i):
        sink = DeltaSink(tmp_path, "job", max_retries=20, backoff_base=0.005, backoff_max=0.1)
        for b in range(n_batches):
            written[i] += sink.append("agg", rows(("k", b, 0.0)), b, schema=SCHEMA)

    _run_threads(replayer, n_threads)

    sink = DeltaSink(tmp_path, "job")
    assert [r["n"] for r in sorted_rows(sink.read("agg"))] == list(range(n_batches))
    assert sum(written) == n_batches
    assert sink.committed_version("agg") == n_batches - 1


def test_writes_by_plain_deltalake_are_read_back(tmp_path):
    """The sink reads tables it did not create, and ignores their (absent) transactions."""
    write_deltalake(str(tmp_path / "ext"), rows(("a", 1, 0.0)), mode="append")
    sink = DeltaSink(tmp_path, "app")
    assert sink.exists("ext")
    assert sink.committed_version("ext") is None
    assert sink.append("ext", rows(("b", 2, 0.0)), 0, schema=SCHEMA)
    assert [r["key"] for r in sorted_rows(sink.read("ext"))] == ["a", "b"]
