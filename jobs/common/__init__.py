"""The shared layer of every job: it imports the library (:mod:`watermark`), never a job or a tool.

- :mod:`jobs.common.session`: the SparkSession (jars, one-machine settings), shipping the code to executors,
  running a batch command on its own session.
- :mod:`jobs.common.schemas`: every Delta table's schema, partitioning, properties and column docs.
- :mod:`jobs.common.tables`: writes through delta-spark (idempotent appends, creating a table).
- :mod:`jobs.common.reads`: light reads without Spark (delta-rs and pyarrow, filtered at the files).
- :mod:`jobs.common.windows`: window partials (Spark and Arrow), open windows, firing and flushing.
- :mod:`jobs.common.retry`: the retry policy of Delta commits that conflict (tenacity).
- :mod:`jobs.common.tabledocs`: the generated column reference of ``docs/tables.md``.
"""
