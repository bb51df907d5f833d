"""Combining the watermarks of a stream's partitions into one, and the idleness of silent partitions."""
