"""The edge daemon (``edgewise serve``): HTTP and broker ingest into a durable queue, worker processes running the
pipelines, backpressure, recovery, reload and drain. ``server.py`` is the entry point."""
