"""The watermark stage on the driver.

Running the generators, combining partitions, key ownership (partition scope), the lateness labels as a Spark
expression, and the driver side of the stage in the executors.
"""
