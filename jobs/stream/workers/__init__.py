"""Code that runs inside Spark's Python workers (and what the driver shares with it).

* :mod:`~jobs.stream.workers.arrow_path`: the Arrow path's two passes over the splits of landing files;
* :mod:`~jobs.stream.workers.executor_stage`: the watermark stage of a Kafka partition, where Spark reads it;
* :mod:`~jobs.stream.workers.frozen_imports`: the job's imports kept out of the collection after each task.

It imports pyarrow, numpy and the light parts of the library, nothing of the driver.
"""
