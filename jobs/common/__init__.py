"""The shared layer of every job: the Spark session, the Delta tables, window adapters, the retry policy.

Table schemas live in :mod:`jobs.common.schemas`, writes in :mod:`jobs.common.tables`, light reads in
:mod:`jobs.common.reads`. It imports the library (:mod:`watermark`), never a job.
"""
