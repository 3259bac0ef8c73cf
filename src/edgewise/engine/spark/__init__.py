"""The Spark engine: a pipeline file as Spark Structured Streaming queries (``edgewise spark``; docs/spark.md).

Needs the ``spark`` extra (PySpark). ``job.SparkJob`` is the entry point; the other modules are its parts, each
with one job (see DEVELOPING.md).
"""
