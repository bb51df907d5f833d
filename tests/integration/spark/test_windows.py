"""Windows: the Spark expression follows the one definition.

Replay and Arrow: tests/unit/jobs/common/test_windows.py.
"""

from jobs.common.windows import assign_windows
from tests.unit.jobs.common.test_windows import SPECS, TRICKY, python_windows


def test_the_spark_expression_follows_the_one_definition(spark):
    frame = spark.createDataFrame([(t,) for t in TRICKY], "event_time_ms long")
    for window in SPECS:
        got = sorted((r[0], r[1]) for r in assign_windows(frame, window).collect())
        assert got == sorted((t, s) for t in TRICKY for s in python_windows(window, t)), window
