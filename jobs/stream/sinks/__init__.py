"""Where a batch's results go: the rows of each Delta table, their commit, and the metrics' view of it.

* :mod:`~jobs.stream.sinks.rows`: the rows of ``aggregates``, ``quarantine``, ``late_events``, ``arrivals``
  and ``watermark_log`` a batch on the driver writes;
* :mod:`~jobs.stream.sinks.commit`: the commit of a batch's tables (idempotent appends, the deferred tables,
  the Delta states prepared ahead);
* :mod:`~jobs.stream.sinks.deferred`: the deferred tables' rows kept in the checkpoint between commits;
* :mod:`~jobs.stream.sinks.sink_options`: what the sinks need of the run's options (and when the deferred
  tables commit);
* :mod:`~jobs.stream.sinks.observation`: what the metrics see of a finished batch.
"""
