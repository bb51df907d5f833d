"""The streaming job's sinks: the rows of each Delta table a batch writes, and the tables it defers."""
