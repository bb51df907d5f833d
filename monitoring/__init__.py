"""Monitoring: the job's Prometheus metrics, its metrics server and listener, and batch tasks' pushes."""
