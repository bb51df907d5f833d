"""Airflow DAGs of the pipeline (thin: project code does the work inside the tasks)."""
