"""Which columns the writer adds to a table an older version of the code wrote, and what it refuses."""

import pytest
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from jobs.common.tables import TableSchemaError, columns_to_add

OLD = StructType([StructField("key", StringType()), StructField("count", LongType())])


def test_the_columns_the_code_added_are_the_ones_to_add_in_the_code_s_order():
    new = StructType([*OLD.fields, StructField("b", DoubleType()), StructField("a", LongType())])
    assert [f.name for f in columns_to_add("t", OLD, new)] == ["b", "a"]
    assert columns_to_add("t", new, new) == []


def test_the_generated_partition_column_is_not_a_removed_column():
    table = StructType([*OLD.fields, StructField("day", StringType())])
    assert columns_to_add("t", table, OLD, generated="day") == []
    with pytest.raises(TableSchemaError, match="'day'"):
        columns_to_add("t", table, OLD)


def test_a_removed_or_retyped_column_names_the_table_the_column_and_the_migration():
    retyped = StructType([StructField("key", StringType()), StructField("count", DoubleType())])
    with pytest.raises(
        TableSchemaError,
        match=r"table 'agg': column 'count' is bigint in the table but double",
    ):
        columns_to_add("agg", OLD, retyped)
    removed = StructType([StructField("key", StringType())])
    with pytest.raises(TableSchemaError, match=r"'count' \(bigint\) is not in the code's schema.*Upgrading"):
        columns_to_add("agg", OLD, removed)


def test_a_reader_reads_null_in_a_column_an_older_writer_did_not_have(tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    from jobs.common.reads import TableReader
    from jobs.common.schemas import TABLES

    full = TABLES["arrivals"]
    old = pa.schema([f for f in full if f.name != "batch_id"])
    rows = pa.Table.from_pylist(
        [{f.name: (f"s{i}" if pa.types.is_string(f.type) else i) for f in old} for i in (1, 2)], schema=old
    )
    write_deltalake(str(tmp_path / "arrivals"), rows)
    read = TableReader(tmp_path, "reader").read("arrivals")
    assert read.schema == full
    assert read.column("batch_id").to_pylist() == [None, None]
    some = TableReader(tmp_path, "reader").read("arrivals", columns=["batch_id", "event_time_ms"])
    assert some.column_names == ["batch_id", "event_time_ms"] and some.column("batch_id").null_count == 2
