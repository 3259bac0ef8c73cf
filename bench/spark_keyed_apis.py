"""What PySpark's two Python state APIs cost for a keyed step in hash buckets, against Spark's own operator: three
hand-written jobs on ``spark_keyed.py``'s input, each a fresh process (a new JVM) from start to exit, sides rotating
round by round (issue 43: "measure before choosing").

* ``native``: ``withWatermark(...).dropDuplicatesWithinWatermark(["k"])``, ``spark_keyed.py``'s yardstick;
* ``tws``: ``transformWithStateInPandas``, as ``engine/spark/keyed_processor.py`` uses it: rows grouped by a hash
  bucket of the key, one ValueState per bucket (its keys' first times as JSON, and its timer), one event-time timer
  per bucket at its earliest ``within`` deadline;
* ``apply``: ``applyInPandasWithState`` (``GroupState``, an event-time timeout), the same logic and the same state.

Both Python sides run one plainly written dedupe (the first event per key by event time, then sequence number, a
key remembered for ``within`` after its first time; ``DEDUPE`` below) over the same columns (the bucket, the key,
the time, the sequence number and the event as JSON text, as edgewise hands its step the event), so what differs is
only the API around it: how rows, state and timers cross between the JVM and Python, and what Spark does to plan
the operator. Each round checks the three outputs by content (the multiset of kept events). Every copy of an event
is the same event, so the native operator's choice among copies does not show.

    .venv/bin/python bench/spark_keyed_apis.py [--events 300000] [--keys 90000] [--rounds 3] [--cores 2]

Writes bench/results/spark_keyed_apis.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_result
from spark_keyed import HAND_WRITTEN, ROOT, SCHEMA, input_arguments, records, write_input
from spark_ysb_start import run

BUCKETS_PER_CORE = 4
"""As edgewise's ``keyed.BUCKETS_PER_PARTITION``, one shuffle partition per core."""

COMMON = r"""
import sys
import orjson
import pandas as pd
from pyspark.sql import SparkSession, functions as F
source, out, ck, cores, schema, buckets = sys.argv[1:7]
WITHIN_MS = 60_000
spark = (SparkSession.builder.master(f"local[{cores}]").appName(sys.argv[7])
         .config("spark.sql.shuffle.partitions", cores).config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.streaming.stateStore.providerClass",
                 "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
         .config("spark.ui.enabled", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
columns = ["k", "t", "seq", "v", "part"]
events = (spark.readStream.schema(schema).json(source).withColumn("event_time", F.timestamp_millis("t"))
          .withWatermark("event_time", "10 seconds"))
rows = events.select(F.expr(f"CAST(pmod(xxhash64(k), {buckets}) AS STRING)").alias("bucket"), "k", "t", "seq",
                     F.to_json(F.struct(*columns)).alias("payload"), "event_time")


def forget(seen, watermark_ms):
    return {k: t for k, t in seen.items() if t + WITHIN_MS > watermark_ms}


def dedupe(frames, seen):
    # the first event per key by (t, seq); a key is remembered for WITHIN_MS after its first time
    frame = pd.concat(list(frames), ignore_index=True).sort_values(["t", "seq"], kind="stable")
    kept = []
    for k, t, payload in zip(frame["k"].tolist(), frame["t"].tolist(), frame["payload"].tolist()):
        first = seen.get(k)
        if first is None or t - first >= WITHIN_MS:
            seen[k] = t
            kept.append(payload)
    return pd.DataFrame({"payload": kept})


def deadline(seen):
    return min(seen.values()) + WITHIN_MS if seen else None


def write(kept):
    query = (kept.writeStream.format("text").option("path", out).option("checkpointLocation", ck)
             .trigger(availableNow=True).start())
    query.awaitTermination()
"""

TWS = COMMON + r"""
from pyspark.sql.streaming.stateful_processor import StatefulProcessor


class Dedupe(StatefulProcessor):
    def init(self, handle):
        self.handle = handle
        self.state = handle.getValueState("bucket", "items STRING, timer BIGINT")

    def _load(self):
        stored = self.state.get()
        return (orjson.loads(stored[0]), stored[1]) if stored is not None else ({}, None)

    def _save(self, seen, held):
        wanted = deadline(seen)
        if wanted != held:
            if held is not None:
                self.handle.deleteTimer(held)
            if wanted is not None:
                self.handle.registerTimer(wanted)
        if seen:
            self.state.update((orjson.dumps(seen).decode(), wanted))
        else:
            self.state.clear()

    def handleInputRows(self, key, rows, timerValues):
        seen, held = self._load()
        seen = forget(seen, timerValues.getCurrentWatermarkInMs())
        kept = dedupe(rows, seen)
        self._save(seen, held)
        if len(kept):
            yield kept

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        seen, _ = self._load()
        seen = forget(seen, max(timerValues.getCurrentWatermarkInMs(), expiredTimerInfo.getExpiryTimeInMs()))
        self._save(seen, None)  # the timer that fired is gone
        yield from ()

    def close(self):
        pass


# the event time goes in as a value, not as the watermark column, so that no late row is dropped (as keyed.py)
write(rows.drop("event_time").groupBy("bucket").transformWithStateInPandas(Dedupe(), "payload STRING", "Append",
                                                                          "EventTime"))
"""

APPLY = COMMON + r"""
from pyspark.sql.streaming.state import GroupStateTimeout


def bucket(key, frames, state):
    seen = orjson.loads(state.get[0]) if state.exists else {}
    seen = forget(seen, state.getCurrentWatermarkMs())
    kept = dedupe(frames, seen) if not state.hasTimedOut else None
    if seen:
        state.update((orjson.dumps(seen).decode(),))
        state.setTimeoutTimestamp(deadline(seen))
    else:
        state.remove()
    if kept is not None and len(kept):
        yield kept


# an event-time timeout needs the watermarked column among the operator's input (a row the watermark passed still
# reaches the function: checked on Spark 4.3, BENCHMARKS.md)
write(rows.groupBy("bucket").applyInPandasWithState(bucket, "payload STRING", "items STRING", "Append",
                                                      GroupStateTimeout.EventTimeTimeout))
"""

JOBS = {"tws": TWS, "apply": APPLY}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    input_arguments(parser)
    args = parser.parse_args()
    sides = ["native", "tws", "apply"]
    times: dict[str, list[float]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory(prefix="edgewise-keyed-apis-") as tmp:
        base = Path(tmp)
        # the Python workers run this interpreter, as edgewise's session has them do (the system's has no pandas)
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYSPARK_PYTHON": sys.executable}
        source = base / "events"
        write_input(source, args.events, args.keys)
        for r in range(args.rounds):
            outputs: dict[str, Counter[str]] = {}
            for side in sides[r % len(sides):] + sides[:r % len(sides)]:
                work = base / f"{side}-{r}"
                work.mkdir()
                common = [str(source), str(work / "out"), str(work / "ck"), str(args.cores), SCHEMA]
                if side == "native":
                    command = [sys.executable, "-c", HAND_WRITTEN, *common]
                else:
                    command = [sys.executable, "-c", JOBS[side], *common, str(BUCKETS_PER_CORE * args.cores), side]
                times[side].append(run(command, env))
                outputs[side] = records(work / "out")
            for side in ("tws", "apply"):
                if outputs[side] != outputs["native"]:
                    missing, extra = outputs["native"] - outputs[side], outputs[side] - outputs["native"]
                    raise SystemExit(f"{side} and native differ: {sum(missing.values())} missing, "
                                     f"{sum(extra.values())} extra")
            print(f"round {r + 1}: " + ", ".join(f"{s} {times[s][-1]:.1f} s" for s in sides)
                  + f"; {sum(outputs['native'].values()):,} events kept by each, outputs equal", flush=True)
    per_round: dict[str, Any] = {
        side: [round(t / n, 3) for t, n in zip(times[side], times["native"], strict=True)] for side in JOBS}
    write_result(str(ROOT / "bench" / "results" / "spark_keyed_apis.json"), {
        "benchmark": "python-state-apis-from-process-start", "events": args.events, "keys": args.keys,
        "rounds": args.rounds, "cores": args.cores, "buckets": BUCKETS_PER_CORE * args.cores,
        "seconds": {side: [round(t, 2) for t in ts] for side, ts in times.items()},
        "median_s": {side: round(statistics.median(ts), 2) for side, ts in times.items()},
        "over_native_per_round": per_round,
        "over_native_median": {side: statistics.median(r) for side, r in per_round.items()},
        "apply_over_tws_per_round": [round(a / t, 3) for a, t in zip(times["apply"], times["tws"], strict=True)],
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
