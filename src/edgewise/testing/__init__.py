"""Public test kit: list sources and sinks, a fake clock, a one-call runner and order-free comparison.

>>> from edgewise.testing import run_pipeline
>>> out = run_pipeline('''
... version: 1
... pipelines:
...   - id: hot
...     steps:
...       - filter: {id: above-30, where: "temp > 30"}
... ''', [{"temp": 35}, {"temp": 20}])
>>> out["hot"]
[{'temp': 35}]
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

from edgewise.clock import FakeClock
from edgewise.config import BuildContext, load_text_plan
from edgewise.config.models import SinkConfig, SourceConfig
from edgewise.config.plan import Plan
from edgewise.engine.local import STDOUT, LocalEngine
from edgewise.events import Batch
from edgewise.jsonio import dumps
from edgewise.sinks.base import Sink
from edgewise.sources.base import Source, SourceContext
from edgewise.sources.lines import make_batch

__all__ = ["FakeClock", "ListSink", "ListSource", "assert_records_equal", "canonical", "run_pipeline"]


class ListSource(Source):
    """Events from a Python list (payload dicts), in batches of ``batch_size``."""

    __test__ = False
    kind: ClassVar[str] = "list"
    Config = SourceConfig

    def __init__(self, events: Iterable[dict[str, Any]], source_id: str = "test") -> None:
        super().__init__(SourceConfig(id=source_id, type="list"), BuildContext("."))
        self.events = list(events)

    def read(self, ctx: SourceContext) -> Iterator[Batch]:
        size = ctx.batch_size
        for start in range(0, len(self.events), size):
            chunk = self.events[start : start + size]
            yield make_batch(chunk, list(range(start, start + len(chunk))), self.id, f"{self.id}:", ctx)


class ListSink(Sink):
    """Keeps what it receives: ``records`` (payloads) and ``ids``."""

    __test__ = False
    kind: ClassVar[str] = "list"
    Config = SinkConfig

    def __init__(self, sink_id: str = "list") -> None:
        # model_construct: internal ids such as "<stdout>" are not user ids and skip their validation
        super().__init__(SinkConfig.model_construct(id=sink_id, type="list"), BuildContext("."))
        self.records: list[dict[str, Any]] = []
        self.ids: list[str] = []

    def write(self, batch: Batch) -> None:
        self.records.extend(batch.payloads)
        self.ids.extend(batch.ids())


def canonical(record: Any) -> bytes:
    """A record's canonical JSON (sorted keys, the engine's number and time encoding), for comparison."""
    import orjson

    return orjson.dumps(orjson.loads(dumps(record)), option=orjson.OPT_SORT_KEYS)


def assert_records_equal(actual: Iterable[Any], expected: Iterable[Any]) -> None:
    """Assert two collections hold the same records, ignoring order (duplicates count)."""
    a = Counter(canonical(r) for r in actual)
    e = Counter(canonical(r) for r in expected)
    if a != e:
        missing = list((e - a).elements())
        extra = list((a - e).elements())
        lines = ["records differ (order ignored)"]
        lines += [f"  missing:    {m.decode()}" for m in missing[:20]]
        lines += [f"  unexpected: {x.decode()}" for x in extra[:20]]
        raise AssertionError("\n".join(lines))


def run_pipeline(pipeline: str | Plan, events: Iterable[dict[str, Any]], *, clock: FakeClock | None = None,
                 base_dir: str = ".") -> dict[str, list[dict[str, Any]]]:
    """Run a pipeline file's text (or a loaded plan) over events; results by pipeline id and by sink id.

    Every sink is replaced by a ``ListSink``: nothing is written anywhere.
    """
    plan = pipeline if isinstance(pipeline, Plan) else load_text_plan(pipeline, "<test>", base_dir)
    sinks: dict[str, Sink] = {sid: ListSink(sid) for sid in plan.sinks}
    sinks[STDOUT] = ListSink(STDOUT)
    outputs: dict[str, list[dict[str, Any]]] = {p.id: [] for p in plan.pipelines}
    engine = LocalEngine(plan, clock=clock or FakeClock(), stdout=io.BytesIO(), sinks=sinks, errors=io.StringIO(),
                         sleep=lambda s: None)
    engine.open()
    try:
        for batch in ListSource(events).read(SourceContext(engine.clock, engine._malformed)):
            for pid, out in engine.process(batch).items():
                outputs[pid].extend(out.payloads)
    finally:
        engine.close()
    for sid, sink in sinks.items():
        if sid != STDOUT and isinstance(sink, ListSink):
            outputs.setdefault(f"sink:{sid}", []).extend(sink.records)
    return outputs
