"""The streaming job's own checkpoint state under ``CHECKPOINT/stage``.

The stage's saved versions, seen ids, open windows: :mod:`jobs.stream.checkpoint.layout` owns every name in
it.
"""
