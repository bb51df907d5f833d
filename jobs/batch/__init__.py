"""The batch jobs the Airflow DAGs submit: the backfill, re-tuning, data quality and table maintenance.

- :mod:`jobs.batch.backfill`: the late-data backfill, run and command line (``spark-submit`` runs this
  file); its reads and classification are :mod:`jobs.batch.backfill_plan`, its MERGEs
  :mod:`jobs.batch.backfill_commit`.
- :mod:`jobs.batch.retune`: re-tuning the watermark on the arrival history, and publishing a better version.
- :mod:`jobs.batch.quality`: the Great Expectations suites on the tables; the store of their results and
  Data Docs is :mod:`jobs.batch.quality_store`, reading results back :mod:`jobs.batch.quality_results`.
- :mod:`jobs.batch.maintenance`: retention, ``OPTIMIZE`` (Z-order) and ``VACUUM``.

Each is a command of its own and imports only :mod:`jobs.common` and the library, never another job.
"""
