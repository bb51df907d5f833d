"""The pipeline's Spark jobs, laid out as the data path.

- :mod:`jobs.stream`: the streaming job (sources, the watermark stage, the checkpoint, the sinks, and the code
  that runs in Spark's Python workers).
- :mod:`jobs.batch`: the batch jobs the Airflow DAGs submit (backfill, re-tuning, data quality, maintenance).
- :mod:`jobs.common`: what every job shares (the Spark session, the table schemas, table writes and light
reads,
  window adapters, the retry policy); it imports no job.
"""
