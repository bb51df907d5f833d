"""The watermark stage, as the driver runs it.

* :mod:`~jobs.stream.stage.stage_options`: what the stage needs of the run's options;
* :mod:`~jobs.stream.stage.states`: the configuration in force and the state each batch starts from;
* :mod:`~jobs.stream.stage.driver`: the generators over a batch's narrow columns, the lateness thresholds;
* :mod:`~jobs.stream.stage.labelling`: the late rows as a Spark ``CASE``;
* :mod:`~jobs.stream.stage.scoped`: key ownership between partitions (partition-scoped mode);
* :mod:`~jobs.stream.stage.executors`: the Spark side of the stage in the executors;
* :mod:`~jobs.stream.stage.summaries`: the driver's reading of the executors' partition summaries.
"""
