"""Spark jobs: the streaming aggregation and its sinks."""
