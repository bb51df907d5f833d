"""Code that runs inside Spark's Python workers.

The Arrow path's passes over landing files and the watermark stage of a Kafka partition. It imports pyarrow,
numpy and the light parts of the library, nothing of the driver.
"""
