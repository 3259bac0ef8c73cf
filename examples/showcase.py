"""The showcase `make run` runs: a real bus fleet replayed live into an edge daemon, on a map in the browser.

1. start `edgewise serve examples/<city>/live.yaml` on 127.0.0.1 (its data in out/showcase/daemon);
2. print the map's address (/ui/map) and the operations page's (/ui);
3. draw the map's backdrop from the recording itself: every position the recording holds, counted per small map
   tile (`edgewise replay --speed max --to -`, read here), published once to the daemon's `backdrop` channel;
4. `edgewise replay` the recording into the daemon at --speed times its recorded pace;
5. wait until the daemon has processed everything and the last windows have closed, and print what it did; cell
   results are in out/showcase/<city's db> (SQLite, table `cells`);
6. on a terminal, keep the map up until Ctrl-C; otherwise stop. Ctrl-C stops cleanly.

Cities (--city):
- austin (the default): a real day of Capital Metro's fleet in Austin, TX (2016-11-25: 181 vehicles, 32,038
  GTFS-realtime positions, data/capmetro-2016-11-25), sorted by the vehicles' clocks and replayed at 1200x (the day
  in about a minute); cells of about 2 km, 5-minute windows. The daemon's source is idle 10 s after the replay's
  end, and its event time then moves on at the replay's pace (`idle_speed: 1200`): the last windows close at once.
  By default the replay publishes the positions to the MQTT broker on 127.0.0.1:1883, where one answers
  (mosquitto), and the daemon subscribes to them, as vehicles and a fleet's gateway do; else it posts them over
  HTTP (--via chooses).
- helsinki: HSL's HFP recordings (data/hsl-hfp-apc-dumps: a few buses, MQTT dumps, the HFP path), at 30x their
  pace; 30 s windows, closed by the idle source's clock (about 45 s after the replay).

With --hub (`make run-hub`, helsinki) live.yaml's `hub-cells` pipeline, the same cells placed at a hub
(`hub_from`), runs where the file puts it: the daemon runs its steps before the window and writes what reaches it
into the link (out/showcase/link: each event's id, event time and the fields the window reads, a segment sealed at
each commit), and one continuous `edgewise spark examples/hsl/live.yaml` (the hub: the same file, nothing else to
configure), started before the replay, reads each segment as it is sealed, closing windows as its watermark moves.
Its live sink posts the cell results to the daemon's channel `hub-cells` (the address the daemon wrote into the
link), shown by the same map (/ui/map?cells=hub-cells) beside the edge's own. After the replay the edge's idle
source writes heartbeats into the link, which close the hub's last windows as the edge's close; SIGTERM then stops
the job cleanly, and without --stay the script compares Spark's cells (out/showcase/hub.db) with the edge's, record
by record. --hub needs the `spark` extra and Java 17.

out/showcase/ is replaced on every run, never appended to. Only the edge core is needed (no Spark, no services),
except for --hub.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import math
import re
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml

ROOT = Path(__file__).resolve().parent.parent
RUN_DIR = ROOT / "out" / "showcase"  # live.yaml's SQLite sinks and link write here too
HUB_CHANNEL = "hub-cells"
BACKDROP_CHANNEL = "backdrop"
BACKDROP_ZOOM = 17
"""The backdrop's tiles: about 300 m wide at Austin's latitude, 150 m at Helsinki's."""


@dataclass(frozen=True)
class City:
    pipeline: str
    """The pipeline file, relative to the repository."""
    recording: str
    replay: tuple[str, ...]
    """`edgewise replay` options that read the recording (format, receive time, order)."""
    speed: str
    db: str
    """The cells' SQLite file in RUN_DIR (the pipeline file's `cells-db` sink)."""
    lat: str
    long: str
    """The recording's fields holding a position (for the backdrop)."""
    map_query: str
    """The map page's options for this fleet (docs/live.md)."""
    max_gap: str
    """Silences of the recording longer than this are shortened to it."""
    closes_after_s: float
    """How far event time must move on after the last message to close the last windows (window + watermark)."""


CITIES = {
    "austin": City(
        pipeline="examples/austin/live.yaml", recording="data/capmetro-2016-11-25/vehicle_positions.csv",
        replay=("--format", "csv", "--time-field", "timestamp", "--order", "time"), speed="1200", db="cells.db",
        lat="latitude", long="longitude", map_query="?vehicle_ttl=600", max_gap="10m",
        closes_after_s=5 * 60 + 60),  # live.yaml's 5-minute windows and 1-minute watermark
    "helsinki": City(
        pipeline="examples/hsl/live.yaml", recording="data/hsl-hfp-apc-dumps/*/hfp.dump",
        replay=("--dedupe-lines",), speed="30", db="hsl.db", lat="lat", long="long", map_query="", max_gap="2s",
        closes_after_s=30 + 10),  # live.yaml's 30 s windows and 10 s watermark
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--city", choices=sorted(CITIES), default="austin",
                        help="austin (default): a day of Capital Metro's fleet; helsinki: HSL's HFP recordings")
    parser.add_argument("--speed", default=None,
                        help="times the recorded pace, or max (default: 1200 for austin, 30 for helsinki: about a "
                        "minute)")
    parser.add_argument("--port", type=int, default=0, help="the daemon's port (default 0: a free one)")
    parser.add_argument("--via", choices=["auto", "mqtt", "http"], default="auto",
                        help="how the replay reaches the daemon: mqtt (through the MQTT broker on 127.0.0.1:1883, "
                        "as vehicles publish their positions), http, or auto (default: mqtt when a broker answers "
                        "there, else http)")
    stay = parser.add_mutually_exclusive_group()
    stay.add_argument("--stay", dest="stay", action="store_true", default=None,
                      help="keep the map up after the replay until Ctrl-C (the default on a terminal)")
    stay.add_argument("--no-stay", dest="stay", action="store_false", help="stop when the replay is done")
    parser.add_argument("--hub", action="store_true",
                        help="helsinki: also run live.yaml's hub part (its hub-cells pipeline from the window on) "
                        "on Spark, over the link the daemon writes, onto the same map")
    args = parser.parse_args(argv)
    city = CITIES[args.city]
    if args.hub and args.city != "helsinki":
        parser.error("--hub runs with --city helsinki (its live.yaml places a pipeline at a hub)")
    speed = args.speed or city.speed
    edgewise = str(Path(sys.executable).with_name("edgewise"))
    stay_up = sys.stdin.isatty() if args.stay is None else args.stay
    hub: Hub | None = None

    via = args.via if args.via != "auto" else ("mqtt" if broker_answers() else "http")
    if via == "mqtt" and args.hub:
        parser.error("--hub runs with --via http")
    if via == "mqtt" and not broker_answers():
        print(f"showcase: no MQTT broker answers on {BROKER[0]}:{BROKER[1]} (start mosquitto, or use --via http)",
              file=sys.stderr)
        return 2
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    RUN_DIR.mkdir(parents=True)
    pipeline, to = ROOT / city.pipeline, "{url}/v1/events"
    if via == "mqtt":
        pipeline, to = over_mqtt(city)
        print(f"showcase: the daemon takes the positions from the MQTT broker on {BROKER[0]}:{BROKER[1]} "
              f"({pipeline.relative_to(ROOT)}: {city.pipeline} with an mqtt source)", flush=True)
    with open(RUN_DIR / "daemon.log", "wb") as log:
        daemon = subprocess.Popen([edgewise, "serve", str(pipeline), "--data-dir",
                                   str(RUN_DIR / "daemon"), "--port", str(args.port)], stdout=log,
                                  stderr=subprocess.STDOUT, cwd=ROOT, preexec_fn=die_with_parent)
    backdrop = Backdrop(edgewise, city)  # read while the daemon starts
    try:
        url = wait_ready(RUN_DIR / "daemon.log", daemon)
        if url is None:
            print(f"showcase: the daemon did not start; its log:\n{(RUN_DIR / 'daemon.log').read_text()}",
                  file=sys.stderr)
            return 1
        pace = "as fast as possible" if speed == "max" else f"at {speed}x their recorded pace"
        print(f"showcase: the map:        {url}/ui/map{city.map_query}\n"
              f"showcase: the operations: {url}/ui", flush=True)
        if args.hub:
            hub = Hub(edgewise, url)
            print(f"showcase: Spark's cells:  {url}/ui/map?cells={HUB_CHANNEL}", flush=True)
            if not hub.start():
                return 1
        print(f"showcase: replaying {city.recording} {pace} over {via.upper()} (Ctrl-C stops)", flush=True)
        replay = subprocess.Popen([edgewise, "replay", city.recording, *city.replay, "--speed", speed,
                                   "--max-gap", city.max_gap, "--to", to.format(url=url)], cwd=ROOT,
                                  preexec_fn=die_with_parent)
        backdrop.publish(url)
        if hub is not None and not hub.follow(replay):
            replay.terminate()
            return 1
        if replay.wait() != 0:
            print("showcase: the replay failed (see above)", file=sys.stderr)
            return 1
        wait_processed(url)
        if not stay_up or hub is not None:  # staying, the map shows them as they close
            wait_closed(url, city.closes_after_s)
        if hub is not None and not hub.finish(count_cells(RUN_DIR / city.db)):
            return 1
        print(f"showcase: {summary(url)}; cell results in {RUN_DIR.relative_to(ROOT) / city.db} "
              f"({count_cells(RUN_DIR / city.db)} rows in table cells)", flush=True)
        if hub is not None and not stay_up:
            print(f"showcase: {compare_cells(RUN_DIR / 'hsl.db', RUN_DIR / 'hub.db')}", flush=True)
        if stay_up:
            print(f"showcase: the map stays up at {url}/ui/map{city.map_query}; Ctrl-C stops", flush=True)
            while daemon.poll() is None:
                time.sleep(0.5)
        return 0
    except KeyboardInterrupt:
        print("\nshowcase: stopping", file=sys.stderr)
        return 130
    finally:
        stop(daemon)


BROKER = ("127.0.0.1", 1883)


def broker_answers() -> bool:
    """Whether an MQTT broker listens on BROKER (mosquitto, where one runs)."""
    import socket

    try:
        with socket.create_connection(BROKER, timeout=0.5):
            return True
    except OSError:
        return False


def over_mqtt(city: City) -> tuple[Path, str]:
    """The city's pipeline file with its http source replaced by an mqtt source on a topic of this run's own (two
    showcases on one broker do not see each other's positions), written into RUN_DIR with its sinks' paths made
    absolute; and the replay's target, that topic."""
    source_file = ROOT / city.pipeline
    doc = yaml.safe_load(source_file.read_text())
    topic = f"edgewise-showcase/{secrets.token_hex(4)}/positions"
    http = doc["sources"][0]
    idle = {k: http[k] for k in ("idle_timeout", "idle_speed") if k in http}
    doc["sources"] = [
        {"id": http["id"], "type": "mqtt", "url": f"mqtt://{BROKER[0]}:{BROKER[1]}", "topics": [topic],
         "format": "json", "qos": 1, "clean_start": True, "client_id": f"edgewise-{topic.split('/')[1]}", **idle},
        # the open http source a daemon has anyway (for the map's backdrop and any post), declared so that it is
        # idle as soon as the mqtt source is, not after the default 30 s
        {"id": "http", "type": "http", "anonymous": True, **idle}]
    for sink in [*doc.get("sinks", []), *([doc["link"]] if "link" in doc else [])]:
        if "path" in sink:
            sink["path"] = str((source_file.parent / sink["path"]).resolve())
    written = RUN_DIR / "live.yaml"
    written.write_text(f"# {city.pipeline}, its source taking MQTT (examples/showcase.py --via mqtt)\n"
                       + yaml.safe_dump(doc, sort_keys=False))
    return written, f"mqtt://{BROKER[0]}:{BROKER[1]}/{topic}"


class Backdrop:
    """Every position of the recording, counted per zoom-BACKDROP_ZOOM map tile: the map draws it, faintly, as
    the city's outline (the routes the fleet drives). Read with `edgewise replay --speed max --to -` in a thread
    while the daemon starts, so it reads the recording exactly as the replay into the daemon does."""

    def __init__(self, edgewise: str, city: City) -> None:
        self.city = city
        self.tiles: Counter[tuple[int, int]] = Counter()
        self.error = ""
        self._thread = threading.Thread(target=self._read, args=(edgewise,), daemon=True)
        self._thread.start()

    def _read(self, edgewise: str) -> None:
        city = self.city
        done = subprocess.run([edgewise, "replay", city.recording, *city.replay, "--speed", "max", "--to", "-",
                               "--quiet", "--progress", "off"], cwd=ROOT, capture_output=True)
        if done.returncode != 0:
            self.error = done.stderr.decode(errors="replace").strip()
        n = 2 ** BACKDROP_ZOOM
        for line in done.stdout.splitlines():
            record = orjson.loads(line)
            with contextlib.suppress(KeyError, TypeError, ValueError):
                lat, lon = float(record[city.lat]), float(record[city.long])
                y = (1 - math.asinh(math.tan(math.radians(lat))) / math.pi) / 2 * n
                self.tiles[int((lon + 180) / 360 * n), int(y)] += 1

    def publish(self, url: str) -> None:
        """To the daemon's backdrop channel, as one record (the map reads it once)."""
        self._thread.join()
        if self.error:
            print(f"showcase: no backdrop: {self.error}", file=sys.stderr)
            return
        tiles = [[x, y, count] for (x, y), count in sorted(self.tiles.items())]
        record = {"id": "backdrop", "event_time": 0, "source": "showcase",
                  "payload": {"zoom": BACKDROP_ZOOM, "tiles": tiles}}
        httpx.post(f"{url}/v1/live/{BACKDROP_CHANNEL}", content=orjson.dumps([record]),
                   headers={"content-type": "application/json"}, timeout=10).raise_for_status()


def die_with_parent() -> None:
    """In a child: ask Linux for SIGTERM when this script dies, even by SIGKILL, so no daemon is left behind."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def wait_ready(log: Path, daemon: subprocess.Popen[bytes], timeout: float = 60) -> str | None:
    """The daemon's address once it is ready (port 0: it chose a free one and logged it), or None if it failed."""
    deadline = time.monotonic() + timeout
    url = None
    while time.monotonic() < deadline and daemon.poll() is None:
        if url is None:
            found = re.search(r"listening url=(\S+)", log.read_text(errors="replace"))
            url = found.group(1) if found else None
        else:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    return url
        time.sleep(0.2)
    return None


def wait_processed(url: str, timeout: float = 300) -> None:
    """Wait until the daemon processed everything."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        q = httpx.get(f"{url}/v1/queue", timeout=5).json()
        if q["queued_events"] == 0 and q["in_flight_entries"] == 0:
            return
        time.sleep(0.5)


def wait_closed(url: str, seconds: float) -> None:
    """Until the idle source has moved event time on by `seconds` (past the last window's end and watermark) since
    the last event was processed, so the last windows have closed: `idle_advanced_s` of /v1/queue, a condition
    rather than a guess at the clock. Over MQTT the broker may still hand the daemon a few messages after the
    queue first looked empty (a loaded machine): each one starts the count again."""
    print("showcase: waiting for the last windows to close (the source is idle: event time moves on without it)",
          flush=True)

    def progress() -> tuple[int, float]:
        q = httpx.get(f"{url}/v1/queue", timeout=5).json()
        return int(q["processed_events"]), float(q.get("idle_advanced_s", 0))

    # the tick that moves event time past `seconds` is reported with its windows' results delivered; the report
    # of one later tick is waited for as well (a second's margin, no more). CI's shortfalls of 51 and 137 cells
    # were the broker dropping messages for a slow MQTT 3.1.1 subscriber, not this wait (the mqtt source's docs)
    (seen, start), deadline = progress(), time.monotonic() + 300
    crossed: float | None = None
    while time.monotonic() < deadline:
        processed, advanced = progress()
        if processed != seen:
            seen, start, crossed = processed, advanced, None
        elif crossed is not None and advanced > crossed:
            return
        elif crossed is None and advanced - start >= seconds:
            crossed = advanced
        time.sleep(0.5)
    print("showcase: the last windows did not close within 5 minutes", file=sys.stderr)


def summary(url: str) -> str:
    """What the daemon did."""
    q = httpx.get(f"{url}/v1/queue", timeout=5).json()
    live = q.get("live", {})
    late = sum(s["outcomes"].get("late", 0) for s in q["steps"])
    return (f"{q['processed_events']} messages processed; {live.get('positions', {}).get('published', 0)} "
            f"positions and {live.get('cells', {}).get('published', 0)} cell results to the map; {late} late")


def count_cells(path: Path) -> int:
    if not path.exists():
        return 0
    with contextlib.closing(sqlite3.connect(path)) as db:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'cells'").fetchone():
            return 0  # no result written yet
        return int(db.execute("SELECT count(*) FROM cells").fetchone()[0])


class Hub:
    """live.yaml's `hub-cells` pipeline at its hub: one continuous `edgewise spark examples/hsl/live.yaml` (the file
    splits the pipeline at its window, `hub_from`), reading the link the daemon writes and posting to its map."""

    def __init__(self, edgewise: str, url: str) -> None:
        self.edgewise = edgewise
        self.url = url
        self.checkpoint = RUN_DIR / "hub-checkpoint"
        self.log = RUN_DIR / "hub.log"
        self.job: subprocess.Popen[bytes] | None = None

    def start(self) -> bool:
        """The hub, started before the replay: the replay begins once its queries run (a JVM takes 10-20 s to
        start), so Spark's cells reach the map during it."""
        print(f"showcase: starting the hub: edgewise spark {CITIES['helsinki'].pipeline}, a continuous job over the "
              f"daemon's link (its log: {self.log.relative_to(ROOT)})", flush=True)
        with open(self.log, "ab") as log:
            self.job = subprocess.Popen([self.edgewise, "spark", str(ROOT / CITIES["helsinki"].pipeline),
                                         "--checkpoint", str(self.checkpoint), "--trigger", "1"], stdout=log,
                                        stderr=subprocess.STDOUT, cwd=ROOT, preexec_fn=die_with_parent)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.job.poll() is not None:
                return self._failed()
            if re.search(r"pipelines? on Spark", self.log.read_text(errors="replace")):
                return True
            time.sleep(0.5)
        return self._failed()

    def follow(self, replay: subprocess.Popen[bytes]) -> bool:
        """While the replay runs: the job reads each segment the daemon seals, within a micro-batch, and posts the
        windows its watermark closed to the map. False if it failed."""
        assert self.job is not None
        told = False
        while replay.poll() is None:
            if self.job.poll() is not None:
                return self._failed()
            if not told and count_cells(RUN_DIR / "hub.db"):
                told = True
                print(f"showcase: Spark's first cell results are on the map during the replay "
                      f"({count_cells(RUN_DIR / 'hub.db')} so far)", flush=True)
            time.sleep(0.5)
        return True

    def finish(self, expected: int, timeout: float = 300) -> bool:
        """Once the edge's last windows have closed: the edge's idle source wrote heartbeats into the link, which
        close the hub's last windows too; wait for them (as many cells as the edge's), then SIGTERM stops the job
        cleanly."""
        assert self.job is not None
        print("showcase: waiting for the hub's last windows (the edge's heartbeats move Spark's watermark on)",
              flush=True)
        deadline = time.monotonic() + timeout
        while count_cells(RUN_DIR / "hub.db") < expected and time.monotonic() < deadline:
            if self.job.poll() is not None:
                return self._failed()
            time.sleep(0.5)
        started = time.monotonic()
        self.job.send_signal(signal.SIGTERM)
        try:
            code = self.job.wait(120)
        except subprocess.TimeoutExpired:
            self.job.kill()
            code = -9
        if code != 0:
            return self._failed()
        print(f"showcase: the hub stopped on SIGTERM in {time.monotonic() - started:.1f} s", flush=True)
        live = httpx.get(f"{self.url}/v1/queue", timeout=5).json().get("live", {})
        print(f"showcase: Spark's cell results in {(RUN_DIR / 'hub.db').relative_to(ROOT)} "
              f"({count_cells(RUN_DIR / 'hub.db')} rows in table cells); "
              f"{live.get(HUB_CHANNEL, {}).get('published', 0)} to the map", flush=True)
        return True

    def _failed(self) -> bool:
        print(f"showcase: the Spark job failed; its log:\n{self.log.read_text(errors='replace')[-3000:]}",
              file=sys.stderr)
        return False


def compare_cells(edge_db: Path, hub_db: Path) -> str:
    """The edge's and Spark's cell results, by cell and window, record by record (numbers by value: docs/spark.md;
    their ids differ: each names its own window step)."""
    from edgewise.engine.spark.fixtures import by_value

    def rows(path: Path) -> dict[str, Any]:
        with contextlib.closing(sqlite3.connect(path)) as db:
            records = [by_value(orjson.loads(p)) for (p,) in db.execute("SELECT payload FROM cells")]
        return {f"{r['cell']} {r['window_start']}": r for r in records}

    edge, hub = rows(edge_db), rows(hub_db)
    differ = sorted(i for i in edge.keys() | hub.keys() if edge.get(i) != hub.get(i))
    if not differ:
        return f"Spark's {len(hub)} cell results equal the edge's"
    return f"Spark's cell results differ from the edge's in {len(differ)} of {len(edge | hub)}: {differ[:5]}"


def stop(daemon: subprocess.Popen[bytes]) -> None:
    if daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


if __name__ == "__main__":
    sys.exit(main())
