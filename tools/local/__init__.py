"""Local services for trying the pipeline on one machine: Kafka (KRaft), Prometheus, the Pushgateway."""
