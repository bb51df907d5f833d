"""Streams to replay: recorded ones (CSV, Parquet) and their time syntax, synthetic ones, perturbations."""
