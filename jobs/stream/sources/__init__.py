"""The streaming job's sources: landing files, Kafka, Spark's rate source; record numbering, validation."""
