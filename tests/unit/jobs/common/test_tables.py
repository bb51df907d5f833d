"""The Delta tables' rows: conformed to their schema (appends through delta-spark:
tests/integration/spark/test_tables.py)."""

import pyarrow as pa
import pytest

from jobs.common.tables import conform


def test_rows_are_conformed_to_the_schema_with_clear_errors():
    schema = pa.schema([("a", pa.int64()), ("b", pa.string())])
    out = conform(pa.table({"b": ["x"], "a": pa.array([1], pa.int32())}), schema)
    assert out.schema == schema
    with pytest.raises(ValueError, match="missing column.*'b'"):
        conform(pa.table({"a": [1]}), schema)
    with pytest.raises(ValueError, match="unexpected column.*'c'"):
        conform(pa.table({"a": [1], "b": ["x"], "c": [2]}), schema)
    with pytest.raises(TypeError, match="pyarrow.Table"):
        conform({"a": [1]}, schema)
