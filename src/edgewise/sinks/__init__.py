"""Sinks: where results go. Each module declares one sink type, its config model and its implementation."""
