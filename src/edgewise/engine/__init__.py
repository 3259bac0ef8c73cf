"""Engines that run plans: ``local`` (this process). The Spark engine comes with the ``spark`` extra."""
