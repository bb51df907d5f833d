"""The batch jobs the Airflow DAGs submit: the backfill, re-tuning, data quality and table maintenance.

Each is a command of its own and imports only :mod:`jobs.common` and the library.
"""
