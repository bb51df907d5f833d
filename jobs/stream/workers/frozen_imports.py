"""Spark's Python workers: the job's imports kept out of the garbage collection that follows every task.

PySpark's daemon runs ``gc.collect()`` after each task of a reused Python worker (``pyspark/daemon.py``).
A worker that has imported the job's executor code (pyarrow, numpy, numba, the watermark package and what
it imports) holds some 130,000 tracked objects, and a full collection of them took 60-70 ms: four times a
micro-batch per worker on the Arrow path, about 0.3 s of CPU a batch on two cores, more than the pyarrow
parsing of 100,000 records. The executor functions call :func:`freeze_imports` on entry: ``gc.freeze()``
moves every object alive then (the imported modules, their functions and constants) to the permanent
generation the collector skips, so the collection after a task scans only what the task itself left.

Once per process, at the first task: objects a later task creates are collected as usual.

>>> import gc
>>> freeze_imports()
>>> gc.get_freeze_count() > 1_000  # the modules imported so far, skipped by every collection from now on
True
"""

from __future__ import annotations

import gc

_frozen = False


def freeze_imports() -> None:
    """Move the objects alive now to the collector's permanent generation, the first time it is called."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.freeze()
