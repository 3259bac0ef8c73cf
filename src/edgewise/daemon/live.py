"""Live results for browsers: named channels of result records that the daemon fans out as Server-Sent Events.

Who publishes: a ``live`` sink in one of the daemon's workers (through the worker's control pipe), the stateless
engine in the daemon's own process, or another engine's ``live`` sink with ``url:`` (``POST /v1/live/<channel>``,
from the daemon's own machine). Who reads: ``GET /v1/live/<channel>/events`` (``text/event-stream``), such as
the map page ``/ui/map``.

A live channel is a picture of the latest results, not a delivery guarantee: it keeps its last ``recent`` records,
so that a browser that connects (or reconnects) draws the current picture at once, and a subscriber that cannot
keep up loses the oldest messages it has not read yet (counted, and told in its stream) instead of slowing the
pipelines down. Results that must not be lost go to a durable sink as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

CHANNEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
KEEPALIVE_S = 15.0
"""A comment line this often keeps proxies from closing a quiet stream (and finds a client that left)."""

_CLOSED = b""


def valid_channel(name: str) -> bool:
    return re.match(CHANNEL_PATTERN, name) is not None


class Subscriber:
    def __init__(self, backlog: int) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=backlog)
        self.dropped = 0

    def offer(self, message: bytes) -> None:
        """Queue a message; when the subscriber is ``backlog`` messages behind, its oldest unread one goes."""
        if self.queue.full():
            with contextlib.suppress(asyncio.QueueEmpty):
                self.queue.get_nowait()
                self.dropped += 1
        self.queue.put_nowait(message)


class Channel:
    def __init__(self, recent: int) -> None:
        self.recent: deque[bytes] = deque(maxlen=recent)
        self.subscribers: set[Subscriber] = set()
        self.published = 0


class LiveHub:
    """The daemon's live channels. ``publish`` may be called from any thread; everything else runs on the loop."""

    def __init__(self, recent: int = 5000, backlog: int = 1024) -> None:
        self.recent = recent
        self.backlog = backlog
        self.channels: dict[str, Channel] = {}
        self.closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def publish(self, channel: str, records: Iterable[bytes]) -> None:
        """Publish records (each one JSON object, serialized) on a channel, from any thread."""
        items = list(records)
        if items and not self.closed:
            self._on_loop(self._publish, channel, items)

    def _publish(self, name: str, items: list[bytes]) -> None:
        with self._lock:
            channel = self.channels.setdefault(name, Channel(self.recent))
            channel.recent.extend(items)
            channel.published += len(items)
            subscribers = list(channel.subscribers)
        message = _array(items)
        for subscriber in subscribers:
            subscriber.offer(message)

    def snapshot(self, name: str) -> bytes:
        """The channel's recent records as one JSON array."""
        with self._lock:
            channel = self.channels.get(name)
            items = list(channel.recent) if channel is not None else []
        return _array(items)

    def stats(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {name: {"published": c.published, "subscribers": len(c.subscribers),
                           "dropped": sum(s.dropped for s in c.subscribers)} for name, c in self.channels.items()}

    async def stream(self, name: str) -> AsyncIterator[bytes]:
        """A subscriber's Server-Sent Events: the recent records first (``event: snapshot``), then each published
        batch as it comes (one JSON array per ``data:``), ``event: dropped`` when it fell behind, a keep-alive
        comment when quiet. Ends when the daemon stops."""
        subscriber = Subscriber(self.backlog)
        with self._lock:
            channel = self.channels.setdefault(name, Channel(self.recent))
            channel.subscribers.add(subscriber)
            first = _array(channel.recent)
        try:
            yield b"retry: 2000\nevent: snapshot\ndata: " + first + b"\n\n"
            told = 0
            while not self.closed:
                try:
                    message = await asyncio.wait_for(subscriber.queue.get(), KEEPALIVE_S)
                except TimeoutError:
                    yield b": keep-alive\n\n"
                    continue
                if message is _CLOSED:
                    break
                if subscriber.dropped > told:
                    yield b'event: dropped\ndata: {"dropped": %d}\n\n' % subscriber.dropped
                    told = subscriber.dropped
                yield b"data: " + message + b"\n\n"
        finally:
            with self._lock:
                channel.subscribers.discard(subscriber)

    def close(self) -> None:
        """End every stream (the daemon is stopping: the HTTP server waits for open responses to end)."""
        self.closed = True
        self._on_loop(self._end_streams)

    def _on_loop(self, work: Callable[..., None], *args: Any) -> None:
        """Run ``work`` on the daemon's loop (subscribers' queues are asyncio's): at once when called there or
        when no loop runs yet, else handed to it from this thread."""
        loop = self._loop
        if loop is None or not loop.is_running() or _running_loop() is loop:
            work(*args)
            return
        with contextlib.suppress(RuntimeError):  # the loop is closing: nobody is listening any more
            loop.call_soon_threadsafe(work, *args)

    def _end_streams(self) -> None:
        with self._lock:
            subscribers = [s for c in self.channels.values() for s in c.subscribers]
        for subscriber in subscribers:
            subscriber.offer(_CLOSED)


def _array(items: Iterable[bytes]) -> bytes:
    """Serialized JSON objects as one JSON array."""
    return b"[" + b",".join(items) + b"]"


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
