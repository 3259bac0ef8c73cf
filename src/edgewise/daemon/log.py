"""Structured log lines on stderr: ``time level event key=value …`` (``--log-format text``, the default) or one
JSON object per line (``--log-format json``) for log shippers."""

from __future__ import annotations

import sys
import threading
from datetime import UTC, datetime
from typing import Any, TextIO

import orjson


class Log:
    def __init__(self, fmt: str = "text", stream: TextIO | None = None) -> None:
        self.fmt = fmt
        self.stream = stream if stream is not None else sys.stderr
        self._lock = threading.Lock()

    def __call__(self, event: str, level: str = "info", **fields: Any) -> None:
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        if self.fmt == "json":
            line = orjson.dumps({"time": now, "level": level, "event": event, **fields}, default=str).decode()
        else:
            parts = [f"{k}={_text(v)}" for k, v in fields.items()]
            line = " ".join([now, level, event, *parts])
        with self._lock:
            print(line, file=self.stream, flush=True)


def _text(value: Any) -> str:
    text = str(value)
    return orjson.dumps(text).decode() if (" " in text or not text or '"' in text) else text
