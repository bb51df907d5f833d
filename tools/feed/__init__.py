"""Feed a recorded or synthetic stream into landing files or a Kafka topic: ``python -m tools.feed``.

:mod:`tools.feed.records` reads or generates the records, :mod:`tools.feed.landing` writes them as landing
files, :mod:`tools.feed.kafka` produces them to a topic, :mod:`tools.feed.cli` is the command line
(``awm feed``).
"""
