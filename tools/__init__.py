"""Tools around the pipeline, not part of it: the feeder, local services, the peer comparison and the demo."""
