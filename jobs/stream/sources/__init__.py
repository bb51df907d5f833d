"""The job's input: its sources, a batch's records read and validated, and the readers the stage takes.

* :mod:`~jobs.stream.sources.source_options`: what reading the source needs of the run's options, with
  what a record must meet (:mod:`~jobs.stream.sources.record_rules`);
* :mod:`~jobs.stream.sources.readers`: landing files, Kafka, Spark's rate source; record numbering;
* :mod:`~jobs.stream.sources.source_log`: the landing files of a micro-batch, from the file source's log;
* :mod:`~jobs.stream.sources.validate`: quarantine reasons and their checks, as Spark expressions;
* :mod:`~jobs.stream.sources.batch_input`: a micro-batch's files and its records, validated;
* :mod:`~jobs.stream.sources.spark_rows`: a batch read by Spark's reader, as the driver path takes it;
* :mod:`~jobs.stream.sources.arrow_reader`: the Arrow reader of JSON landing files (the driver's side of the
  Arrow path; its passes run in :mod:`jobs.stream.workers.arrow_path`).
"""
