"""The job's checkpoint on disk: its layout, and what the job keeps in it from one batch to the next.

* :mod:`~jobs.stream.checkpoint.layout`: every name under ``CHECKPOINT`` (the one module that knows them);
* :mod:`~jobs.stream.checkpoint.state`: the stage's state per batch under ``CHECKPOINT/stage`` and the
  checkpoint's Delta application id;
* :mod:`~jobs.stream.checkpoint.dedup`: the event ids of the deduplication horizon.
"""
