"""The Delta tables: delta-spark appends, exactly once per batch; light readers that always exit 0."""

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from jobs.common.schemas import TABLES
from jobs.common.tables import DeltaTables, create_table

ROOT = Path(__file__).resolve().parents[3]


def one_row(schema: pa.Schema, i: int = 0) -> pa.Table:
    """A row of ``schema`` with a value of the right type in every column."""
    values = {
        pa.int64(): i,
        pa.float64(): 1.5,
        pa.string(): f"s{i}",
        pa.bool_(): False,
    }
    return pa.Table.from_pylist([{f.name: values[f.type] for f in schema}], schema=schema)


def commit_infos(table_dir: Path) -> list[dict]:
    out = []
    for f in sorted((table_dir / "_delta_log").glob("*.json")):
        for line in f.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                out.append(action["commitInfo"])
    return out


def test_an_append_is_written_by_spark_and_a_replayed_batch_is_skipped_by_delta(spark, tmp_path):
    tables = DeltaTables(tmp_path, "job-1", spark)
    schema = TABLES["arrivals"]
    assert tables.append("arrivals", one_row(schema, 1), 0)
    assert tables.append("arrivals", one_row(schema, 2), 1)
    tables.append("arrivals", one_row(schema, 3), 1)  # a replay of batch 1: Delta skips it
    tables.append("arrivals", one_row(schema, 4), 0)  # an older batch too
    rows = tables.read("arrivals").sort_by("event_time_ms").column("event_time_ms").to_pylist()
    assert rows == [1, 2]
    assert tables.committed_version("arrivals") == 1
    assert DeltaTables(tmp_path, "another-app").committed_version("arrivals") is None
    infos = commit_infos(tmp_path / "arrivals")
    # The first append created the table (partitioned by its date) in the commit of its rows; the two
    # skipped appends made no commit.
    assert [info["operation"] for info in infos] == ["WRITE", "WRITE"]
    assert all(info["engineInfo"].startswith("Apache-Spark/") for info in infos)
    txns = [
        json.loads(line)["txn"]
        for f in sorted((tmp_path / "arrivals" / "_delta_log").glob("*.json"))
        for line in f.read_text().splitlines()
        if "txn" in json.loads(line)
    ]
    assert [(t["appId"], t["version"]) for t in txns] == [("job-1", 0), ("job-1", 1)]


def table_definition(table_dir: Path) -> dict:
    """The metadata (its id and time left out) and protocol of a table's first commit."""
    first = (table_dir / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
    actions = {key: value for line in first for key, value in json.loads(line).items()}
    metadata = {k: v for k, v in actions["metaData"].items() if k not in ("id", "createdTime")}
    metadata["schemaString"] = json.loads(metadata["schemaString"])
    return {"metaData": metadata, "protocol": actions["protocol"]}


def test_a_table_its_first_append_creates_is_defined_as_a_created_table_and_holds_the_rows(spark, tmp_path):
    tables = DeltaTables(tmp_path / "appended", "job", spark)
    for table in TABLES:
        create_table(spark, str(tmp_path / "created" / table), table)
        assert tables.append(table, one_row(TABLES[table], 7), 3)
        # One commit: the table's definition, its first rows and the batch's txn together.
        (commit,) = (tmp_path / "appended" / table / "_delta_log").glob("*.json")
        actions = [next(iter(json.loads(line))) for line in commit.read_text().splitlines()]
        assert {"metaData", "protocol", "txn", "add"} <= set(actions)
        # Its schema (the generated date column included), partitioning, properties and protocol are
        # those of a table created empty (the layout migration's and older versions' way).
        created = table_definition(tmp_path / "created" / table)
        assert table_definition(tmp_path / "appended" / table) == created
        assert tables.committed_version(table) == 3
        assert tables.read(table).num_rows == 1
    # A later writer's appends find the tables and compute the generated column themselves.
    later = DeltaTables(tmp_path / "appended", "job", spark)
    assert later.append("aggregates", one_row(TABLES["aggregates"], 86_400_000 * 3), 4)
    dates = spark.read.format("delta").load(later.path("aggregates")).select("window_date").collect()
    assert sorted(str(r.window_date) for r in dates) == ["1970-01-01", "1970-01-04"]


def test_a_batch_without_rows_writes_nothing_and_a_missing_table_reads_empty(spark, tmp_path):
    tables = DeltaTables(tmp_path, "job", spark)
    assert not tables.append("late_events", TABLES["late_events"].empty_table(), 0)
    assert not tables.exists("late_events")
    empty = tables.read("late_events")
    assert empty.num_rows == 0 and empty.schema == TABLES["late_events"]
    assert tables.read("late_events", columns=["batch_id"]).column_names == ["batch_id"]
    with pytest.raises(FileNotFoundError, match="not_a_table"):
        tables.read("not_a_table")


@pytest.mark.parametrize("table", ["late_events", "arrivals"])  # every pipeline table is created first
def test_a_table_whose_creation_was_killed_before_its_first_commit_is_created_on_the_next_append(
    spark, tmp_path, table
):
    # What a SIGKILL between delta-spark's temporary first commit and its rename leaves behind.
    log_dir = tmp_path / table / "_delta_log"
    (log_dir / "_staged_commits").mkdir(parents=True)
    (log_dir / ".00000000000000000000.json.d090d940.tmp").write_text('{"commitInfo":{}}\n')
    tables = DeltaTables(tmp_path, "job", spark)
    assert tables.append(table, one_row(TABLES[table]), 0)
    assert tables.read(table).num_rows == 1
    # The leftover is removed before the first append creates the table.
    assert not list(log_dir.glob("*.tmp"))
    # A table with commits is never touched.
    other = DeltaTables(tmp_path, "job", spark)
    assert other.append(table, one_row(TABLES[table], 1), 1)
    assert other.read(table).num_rows == 2


def test_clearing_an_uncommitted_log_deletes_only_the_files_it_found_and_an_emptied_folder(spark, tmp_path):
    from jobs.common.tables import clear_uncommitted_log

    # What a killed creation leaves: a temporary commit, its checksum and an empty _staged_commits folder.
    killed = tmp_path / "killed"
    log_dir = killed / "_delta_log"
    (log_dir / "_staged_commits").mkdir(parents=True)
    (log_dir / ".00000000000000000000.json.d090d940.tmp").write_text('{"commitInfo":{}}\n')
    (log_dir / "..00000000000000000000.json.d090d940.tmp.crc").write_text("crc")
    assert clear_uncommitted_log(spark, str(killed))
    assert not log_dir.exists() and killed.exists()  # the folder, emptied, is gone; nothing above it

    # A sub-folder that holds anything was not listed file by file: it and the folder stay, only the
    # temporary files found at the top are deleted (the old code deleted the whole _delta_log recursively).
    log_dir.mkdir(parents=True)
    (log_dir / ".00000000000000000000.json.0badc0de.tmp").write_text('{"commitInfo":{}}\n')
    (log_dir / "_staged_commits").mkdir()
    staged = log_dir / "_staged_commits" / "00000000000000000000.4f3a.json"
    staged.write_text('{"commitInfo":{}}\n')
    assert clear_uncommitted_log(spark, str(killed))
    assert staged.read_text() == '{"commitInfo":{}}\n'
    assert sorted(p.name for p in log_dir.iterdir()) == ["_staged_commits"]

    # A log with a commit is left as it is.
    committed = tmp_path / "committed" / "_delta_log"
    committed.mkdir(parents=True)
    (committed / "00000000000000000000.json").write_text('{"commitInfo":{}}\n')
    (committed / ".00000000000000000001.json.0badc0de.tmp").write_text("{}\n")
    assert not clear_uncommitted_log(spark, str(committed.parent))
    assert len(list(committed.iterdir())) == 2


def test_every_row_of_an_arrow_table_with_an_empty_chunk_inside_is_appended(spark, tmp_path):
    # PySpark 4.1 and 4.2: createDataFrame stops at an empty record batch after a non-empty one (3 rows of 6).
    schema = TABLES["arrivals"]
    parts = [one_row(schema, 1), schema.empty_table(), one_row(schema, 2), one_row(schema, 3)]
    rows = pa.concat_tables(parts)
    assert [b.num_rows for b in rows.to_batches()] == [1, 0, 1, 1]
    tables = DeltaTables(tmp_path, "job", spark)
    tables.append("arrivals", rows, 0)
    assert sorted(tables.read("arrivals").column("event_time_ms").to_pylist()) == [1, 2, 3]


def test_a_dataframe_is_appended_as_it_is(spark, tmp_path):
    tables = DeltaTables(tmp_path, "native", spark)
    frame = spark.createDataFrame([("k", 1)], "key STRING, n LONG")
    assert tables.append("counts", frame, 7)
    assert tables.append("counts", frame, 7)  # skipped by Delta
    assert tables.read("counts").to_pylist() == [{"key": "k", "n": 1}]
    assert tables.committed_version("counts") == 7


def test_bad_arguments_are_refused(spark, tmp_path):
    with pytest.raises(ValueError, match="app_id"):
        DeltaTables(tmp_path, "")
    with pytest.raises(ValueError, match="SparkSession"):
        DeltaTables(tmp_path, "r").append("arrivals", one_row(TABLES["arrivals"]), 0)
    with pytest.raises(ValueError, match=">= 0"):
        DeltaTables(tmp_path, "w", spark).append("arrivals", one_row(TABLES["arrivals"]), -1)
    with pytest.raises(ValueError, match="plain directory name"):
        DeltaTables(tmp_path, "r").path("../x")


READER = """
import sys
from jobs.common.tables import DeltaTables, create_table
table = DeltaTables(sys.argv[1], "reader").read(sys.argv[2])
print(table.num_rows)
"""


@pytest.mark.slow
def test_a_reader_of_every_table_exits_0_every_time_in_a_fresh_process(spark, tmp_path):
    tables = DeltaTables(tmp_path, "job", spark)
    for batch in range(3):  # a few commits and files per table, as a running job leaves them
        tables.append_all({name: one_row(schema, batch) for name, schema in TABLES.items()}, batch)
    runs = 2  # every table twice: a reader that crashes at exit now and then shows it in a run or the next
    procs = [
        (
            name,
            subprocess.Popen(
                [sys.executable, "-c", READER, str(tmp_path), name],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )  # fmt: skip
        for name in TABLES
        for _ in range(runs)
    ]
    for name, proc in procs:
        out, err = proc.communicate()
        assert proc.returncode == 0, f"reader of {name} exited {proc.returncode}: {err[-2000:]}"
        assert out.strip() == "3"
