"""The ``edgewise`` command."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from edgewise import __version__, collector
from edgewise.errors import ConfigError, EdgewiseError, InputMissing, PluginError, SinkError, SourceError
from edgewise.wording import count

if TYPE_CHECKING:
    from edgewise.config.plan import Plan
    from edgewise.diff import DiffReport
    from edgewise.progress import StatusLine
    from edgewise.sources.base import Source

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_INTERNAL = 0, 1, 2, 70  # 70: EX_SOFTWARE, an internal error

DESCRIPTION = """\
edgewise runs one declarative pipeline file anywhere: as a one-shot command, as an edge daemon, or on Spark.

examples:
  edgewise run pipeline.yaml events.ndjson      run the pipelines over a file; results on stdout
  cat events.ndjson | edgewise run pipeline.yaml
  edgewise validate pipeline.yaml               check a file; errors name file, line, field and expectation
  edgewise explain pipeline.yaml                print the compiled plan
  edgewise test conformance/                    run pipeline unit tests (*.test.yaml)
  edgewise test conformance/ --engine spark     the same tests as Spark jobs
  edgewise spark pipeline.yaml --once           run on Spark (exactly-once; pip install 'edgewise[spark]')
  edgewise serve pipeline.yaml --port 8080      the edge daemon: HTTP/MQTT/NATS in, durable queue, workers
  edgewise inspect queue --data-dir DIR         what the daemon's queue holds (also: dead-letters, state)
  edgewise diff old.yaml new.yaml in.ndjson     what a change to a file does to its output, record by record
  edgewise replay 'rec/*/hfp.dump' --speed 10 --to http://127.0.0.1:8080
                                                a recording, at ten times its pace, into a running daemon
  edgewise keygen edge.key; edgewise verify timelines/edge --pubkey KEY
                                                a key for an entwine timeline; check a timeline's chain
  edgewise import-binge agglo.json > p.yaml     an agglo/binge configuration as a pipeline file
  edgewise functions                            list the expression functions
"""


def main(argv: Sequence[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(given)
    args = parser.parse_args(given)
    if not getattr(args, "command", None):
        parser.print_help()
        return EXIT_CONFIG
    try:
        return int(args.handler(args))
    except ConfigError as exc:
        print(f"edgewise: invalid configuration\n{exc.render()}", file=sys.stderr)
        return EXIT_CONFIG
    except (PluginError, InputMissing) as exc:
        print(f"edgewise: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except (SinkError, SourceError) as exc:
        print(f"edgewise: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except EdgewiseError as exc:
        print(f"edgewise: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("edgewise: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK  # `edgewise run ... | head`: the reader has what it wanted
    except Exception as exc:  # a bug: one clear line, the traceback only when asked for
        if args.debug or os.environ.get("EDGEWISE_DEBUG"):
            raise
        print(f"edgewise: internal error in `edgewise {args.command}`: {unexpected(exc)}. This is a bug in "
              "edgewise (exit code 70); run again with --debug for the traceback", file=sys.stderr)
        return EXIT_INTERNAL


def unexpected(exc: BaseException) -> str:
    """An unexpected exception in one line: its type, message and the innermost edgewise frame it came from."""
    import traceback

    where = ""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if "edgewise" in frame.filename:
            path = frame.filename.replace(os.sep, "/")
            where = f" (at {path[path.rfind('edgewise/'):]}:{frame.lineno})"
            break
    message = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}{': ' + message if message else ''}{where}"


class _Commands:
    """The subcommands, built only for the command this invocation runs (every one for ``--help`` or when no
    command is named): the parsers and ~150 options of all of them cost a one-shot run more than its own work.
    A name that is no command gets every command listed, as argparse's error lists its choices."""

    def __init__(self, sub: Any, wanted: str | None) -> None:
        self.sub = sub
        self.wanted = wanted
        self.choices = sub.choices
        self.skipped: list[tuple[str, str | None]] = []

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        if self.wanted is None or name == self.wanted:
            raw = kwargs.pop("formatter_class", None) is argparse.RawDescriptionHelpFormatter
            return self.sub.add_parser(name, formatter_class=_RawHelp if raw else _Help, **kwargs)
        self.skipped.append((name, kwargs.get("help")))
        return _NotBuilt()

    def finish(self) -> None:
        if self.wanted is not None and self.wanted not in self.choices:
            for name, help_line in self.skipped:
                self.sub.add_parser(name, help=help_line)


class _SizedHelp(argparse.HelpFormatter):
    """argparse's help, given the terminal's width without ``shutil``: argparse imports it to ask (with bz2 and
    lzma, ~3% of a one-shot run), and every ``add_argument`` makes a formatter to check the option's metavar."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position, _columns() - 2 if width is None else width)


class _Help(_SizedHelp):
    pass


class _RawHelp(_SizedHelp, argparse.RawDescriptionHelpFormatter):
    pass


def _columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` finds it: ``COLUMNS`` where it is a positive number,
    else standard output's terminal, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0 and sys.__stdout__ is not None:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


class _NotBuilt:
    """Takes the options of a command that is not run, and forgets them."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self


def _command_named(argv: Sequence[str] | None) -> str | None:
    """The command ``argv`` names (its first word that is not an option), or None for all of them: no argv (the
    whole parser, for docs and tests), or a help option before any command."""
    if argv is None:
        return None
    for word in argv:
        if word in ("-h", "--help"):
            return None
        if not word.startswith("-"):
            return word
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser; with ``argv``, only the options of the command it names are built."""
    parser = argparse.ArgumentParser(prog="edgewise", description=DESCRIPTION, formatter_class=_RawHelp)
    parser.add_argument("--version", action="version", version=f"edgewise {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the Python traceback of an internal error (also: EDGEWISE_DEBUG=1)")
    sub = _Commands(parser.add_subparsers(dest="command", metavar="COMMAND"), _command_named(argv))

    run = sub.add_parser("run", help="run pipelines over input, once (command mode)",
                         description="Run the pipelines of a file over its sources, or over INPUT (NDJSON; '-' "
                         "for stdin) or stdin when the file declares no source. Pipelines without `to:` print "
                         "their results to stdout, one JSON object per line. Exit code: 0 ok, 1 an event failed "
                         "(on_error: fail), a record was malformed or a sink failed, 2 invalid configuration.")
    run.add_argument("pipeline", help="the pipeline file (YAML or JSON)")
    run.add_argument("input", nargs="?", help="NDJSON input file, or '-' for stdin (replaces declared sources)")
    run.add_argument("--pipeline", dest="only", action="append", metavar="ID",
                     help="run only this pipeline (repeatable)")
    run.add_argument("--part", choices=["all", "edge", "hub"], default="all",
                     help="of a file with split pipelines (hub_from, placement): all of it (the default, the "
                     "reference), only what the edge runs (into the link), or only the hub's part (from the link)")
    run.add_argument("--batch-size", type=int, default=1024, help="events per batch (default 1024)")
    run.add_argument("--quiet", "-q", action="store_true", help="no summary line on stderr")
    run.add_argument("--commit-interval", type=float, default=1.0, metavar="SECONDS",
                     help="with a sqlite/redis state store: flush sinks and commit state and input position at "
                     "most this often (default 1; 0 after every batch). A killed run resumes from the last commit")
    run.add_argument("--fresh", action="store_true",
                     help="forget the state and input positions a previous run left in the state store")
    run.set_defaults(handler=cmd_run)

    bench = sub.add_parser(
        "bench", help="measure how fast a pipeline file runs on the local engine, and where the time goes",
        description="Read the input (the file's own sources, which must end by themselves, or INPUT as NDJSON) "
        "into memory, then run the pipelines over it ROUNDS times, each a fresh engine, with every sink replaced "
        "by a counter and state in memory: the pipeline's own cost on one core, without I/O. Prints the median "
        "events/s, the rounds' range, the share of time in each step and the peak memory. The repository's "
        "bench/ harness compares edgewise with hand-written baselines (BENCHMARKS.md).")
    bench.add_argument("pipeline", help="the pipeline file (YAML or JSON)")
    bench.add_argument("input", nargs="?", help="NDJSON input file (replaces declared sources)")
    bench.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5); the median is reported")
    bench.add_argument("--events", type=int, metavar="N", help="use only the first N events of the input")
    bench.add_argument("--pipeline", dest="only", action="append", metavar="ID",
                       help="run only this pipeline (repeatable)")
    bench.add_argument("--batch-size", type=int, default=1024, help="events per batch (default 1024)")
    bench.add_argument("--json", action="store_true", help="print the result as JSON")
    bench.set_defaults(handler=cmd_bench)

    validate = sub.add_parser("validate", help="check pipeline files without running them")
    validate.add_argument("pipelines", nargs="+", metavar="PIPELINE")
    validate.set_defaults(handler=cmd_validate)

    explain = sub.add_parser("explain", help="print the compiled plan of a pipeline file")
    explain.add_argument("pipeline")
    explain.add_argument("--engine", choices=["local", "spark"], default="local",
                         help="which engine's plan: local (steps and compiled expressions) or spark (each "
                         "pipeline's Spark physical plan; needs the spark extra)")
    explain.add_argument("--verbose", "-v", action="store_true", help="with --engine spark: Spark's own chatter too")
    explain.add_argument("--checkpoint", default=None, metavar="DIR",
                         help="with --engine spark: the job's checkpoint (input types pinned there are used; "
                         "default a temporary directory)")
    explain.set_defaults(handler=cmd_explain)

    spark = sub.add_parser(
        "spark", help="run the pipelines as Spark Structured Streaming jobs (exactly-once; needs the spark extra)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Compile each pipeline of the file to a Spark Structured Streaming query and run it: the "
        "file's sources (a file spool, nats, a generator) are read from where the checkpoint says the last run "
        "committed; results go to the pipelines' sinks through idempotent writers, so a killed and restarted job "
        "gives each result exactly once.",
        epilog="examples:\n"
        "  edgewise spark pipeline.yaml --checkpoint ./ck            run until stopped (Ctrl-C)\n"
        "  edgewise spark pipeline.yaml --checkpoint ./ck --once     process what is there, flush windows, stop\n"
        "  edgewise spark pipeline.yaml --checkpoint ./ck --once --keep-open   the same, hourly on growing input\n"
        "  edgewise spark pipeline.yaml --master spark://host:7077 --python-env env.tar.gz --checkpoint /shared/ck\n"
        "  $(edgewise spark pipeline.yaml --master spark://host:7077 --checkpoint /shared/ck --print-submit)\n"
        "                                    the same through spark-submit (docs/deploy.md)\n"
        "\n"
        "The first run on an install records the classes Spark's JVM loads; a background helper then archives them\n"
        "(~200 MB in ~/.cache/edgewise, or $EDGEWISE_CACHE_DIR) and later runs start ~4 s sooner.\n"
        "EDGEWISE_SPARK_ARCHIVE=off turns this off.")
    spark.add_argument("pipeline", help="the pipeline file")
    spark.add_argument("--master", default=None,
                       help="Spark master URL (default local[*]; under spark-submit, the submitted master)")
    spark.add_argument("--checkpoint", default="./edgewise-checkpoint", metavar="DIR",
                       help="checkpoint directory: offsets, state and pinned input types per pipeline "
                       "(default ./edgewise-checkpoint); keep it to resume, delete it to start over")
    spark.add_argument("--once", action="store_true",
                       help="process what the sources hold now, flush open windows, and stop (availableNow)")
    spark.add_argument("--keep-open", action="store_true",
                       help="with --once: leave the windows and event-time completions still open in the checkpoint "
                       "for the next run to continue, instead of closing them at the end of the input (a job run "
                       "periodically on input that keeps growing); results then come out as the watermark passes")
    spark.add_argument("--pipeline", dest="only", action="append", metavar="ID",
                       help="run only this pipeline (repeatable)")
    spark.add_argument("--max-files-per-trigger", type=int, default=None, metavar="N",
                       help="spool segments per micro-batch (default: all available)")
    spark.add_argument("--trigger", type=float, default=0.0, metavar="SECONDS",
                       help="micro-batch interval of a continuous job (default 0: back to back; 1 s for a pipeline "
                            "with processing-time timers, which runs micro-batches without data too)")
    spark.add_argument("--quiet", "-q", action="store_true", help="no line per micro-batch on stderr")
    spark.add_argument("--verbose", "-v", action="store_true",
                       help="let Spark's own start-up notices and Python worker chatter through to stderr")
    spark.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                       help="extra Spark configuration (repeatable), e.g. spark.sql.shuffle.partitions=8; Java options "
                            "(spark.driver.extraJavaOptions) are added to edgewise's")
    spark.add_argument("--python-env", metavar="ARCHIVE",
                       help="a packed Python environment with edgewise (venv-pack; docs/deploy.md): shipped to the "
                       "executors, which run their Python from it instead of the driver's interpreter")
    spark.add_argument("--print-submit", action="store_true",
                       help="print the spark-submit command that runs this job (its Python entry file, the pipeline "
                       "and checkpoint as absolute paths, these options) instead of running it")
    spark.set_defaults(handler=cmd_spark)

    schema = sub.add_parser("schema", help="print the JSON Schema of pipeline files (for editors)")
    schema.set_defaults(handler=cmd_schema)

    test = sub.add_parser("test", help="run pipeline unit tests from YAML fixtures (*.test.yaml)")
    test.add_argument("paths", nargs="+", metavar="PATH", help="fixture files or directories")
    test.add_argument("--verbose", "-v", action="store_true", help="with --engine spark: Spark's own chatter too")
    test.add_argument("--engine", choices=["local", "spark"], default="local",
                      help="run the cases on the local engine (default) or as Spark jobs (needs the spark extra); "
                      "cases Spark cannot run are listed as n/a with the reason")
    test.set_defaults(handler=cmd_test)

    serve = sub.add_parser(
        "serve", help="run the edge daemon: HTTP, webhooks, MQTT and NATS into a durable queue, then the pipelines",
        description="Run the pipelines as a daemon. Events arrive over HTTP (POST /v1/events, /v1/webhooks/<source>)"
        " and from the file's mqtt and nats sources; each request is acknowledged (202) only after it is durably "
        "queued, and removed from the queue only after every pipeline and sink took it. A killed daemon needs no "
        "flag: the next start recovers the queue before it accepts anything. SIGTERM drains and exits 0; SIGHUP "
        "reloads the pipeline file (an invalid file is rejected, the old one keeps running).",
        epilog="endpoints: /v1/events /v1/webhooks/{source} /healthz /readyz /metrics /v1/queue "
        "/v1/state/{step}/{key} /openapi.json /ui")
    serve.add_argument("pipeline", help="the pipeline file (YAML or JSON)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    serve.add_argument("--data-dir", default="./edgewise-data", help="queue, state and locks (default "
                       "./edgewise-data)")
    serve.add_argument("--fsync", choices=["always", "group", "none"], default="group",
                       help="group (default): concurrent requests share one fsync, each reply waits for its own; "
                       "always: one fsync per request; none: the OS decides (survives a killed process, not a "
                       "power loss)")
    serve.add_argument("--workers", type=int, default=1, help="worker processes running the pipelines (default 1); "
                       "stateful steps are partitioned by key over them (docs/daemon.md)")
    serve.add_argument("--high-water", type=int, default=1_000_000, metavar="EVENTS",
                       help="answer 429 above this many queued events (default 1,000,000)")
    serve.add_argument("--low-water", type=int, default=None, metavar="EVENTS",
                       help="accept again at or below this many (default half the high-water mark)")
    serve.add_argument("--max-queue-bytes", type=int, default=None, help="cap the queue database's size; at the "
                       "cap ingest answers 507")
    serve.add_argument("--min-free", type=int, default=64 * 1024 * 1024, metavar="BYTES",
                       help="answer 507 when the disk has less than this free (default 64 MiB)")
    serve.add_argument("--commit-interval", type=float, default=0.5, metavar="SECONDS",
                       help="how often workers flush sinks (a file sink seals a segment), commit state and "
                       "remove finished events from the queue (default 0.5)")
    serve.add_argument("--max-batch", type=int, default=4096, help="events a worker takes at once (default 4096)")
    serve.add_argument("--worker-nice", type=int, default=5, metavar="N", choices=range(20),
                       help="run the workers N steps below the server's CPU priority (nice; default 5, 0: the "
                       "same): when the cores are busy, accepting events comes first and the backlog waits in the "
                       "durable queue")
    serve.add_argument("--trace", choices=["off", "console", "otlp"], default="off",
                       help="OpenTelemetry spans per pipeline and step (default off)")
    serve.add_argument("--log-format", choices=["text", "json"], default="text", help="log lines on stderr")
    serve.add_argument("--stateless", action="store_true",
                       help="no queue: reply after the pipelines ran, with their results")
    serve.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate (PEM; with --tls-key)")
    serve.add_argument("--tls-key", metavar="FILE", help="the certificate's private key (PEM)")
    serve.add_argument("--tls-client-ca", metavar="FILE",
                       help="mutual TLS: accept only clients with a certificate this CA signed (mesh peers)")
    serve.add_argument("--max-header-bytes", type=int, default=16 * 1024, metavar="BYTES",
                       help="requests with larger headers get 431 (default 16384)")
    serve.add_argument("--read-token-env", metavar="VAR",
                       help="environment variable with the read token(s) (comma-separated) of protected endpoints")
    serve.add_argument("--protect", metavar="GROUPS", type=_groups,
                       help="endpoint groups that need a read token: state, queue, metrics, ui, live (comma-"
                       "separated) or none (default: state,queue when any http source requires credentials)")
    serve.add_argument("--concurrency", type=int, default=64,
                       help="--stateless: requests processed or waiting at once before 429 (default 64)")
    serve.add_argument("--keep-recent", type=int, default=1000, metavar="N",
                       help="keep the last N queue entries of finished input for --check-reload (default 1000; "
                       "0 keeps none)")
    serve.add_argument("--check-reload", metavar="NEW", help="do not serve: show what reloading the daemon of "
                       "--data-dir with NEW would change, by running PIPELINE and NEW over its recent input "
                       "(as `edgewise diff`; exit 0 equal, 1 different, 2 invalid)")
    serve.add_argument("--format", choices=["text", "json"], default="text", help="--check-reload: the report's form")
    serve.set_defaults(handler=cmd_serve)

    inspect = sub.add_parser("inspect", help="look into a daemon's data directory: queue, dead letters, state")
    inspect.add_argument("what", choices=["queue", "dead-letters", "state"])
    inspect.add_argument("pipeline", nargs="?", help="with state: the pipeline file (to find its stores)")
    inspect.add_argument("--data-dir", default="./edgewise-data")
    inspect.add_argument("--limit", type=int, default=20, help="entries or dead letters to show (default 20)")
    inspect.add_argument("--step", help="with state: only this step")
    inspect.add_argument("--json", action="store_true", help="one JSON object per line")
    inspect.set_defaults(handler=cmd_inspect)

    replay = sub.add_parser("replay-dead-letters", help="queue dead letters again (with their event ids)")
    replay.add_argument("--data-dir", default="./edgewise-data")
    replay.add_argument("numbers", nargs="*", type=int, metavar="N",
                        help="only these dead letters (numbers from `inspect dead-letters`); default all")
    replay.set_defaults(handler=cmd_replay_dead_letters)

    diff = sub.add_parser(
        "diff", help="run two versions of a pipeline file over the same input and show what changes",
        description="Run OLD and NEW over the same input on the local engine (event time from the events, a fake "
        "processing-time clock; every sink replaced by one that keeps its records, so nothing is written; state in "
        "a temporary directory) and report, per pipeline and per sink, records only in old, only in new and changed "
        "(field by field, matched by event id), and each step's counters side by side. Use it before reloading a "
        "daemon with a changed file. Exit code: 0 equal, 1 different, 2 invalid configuration.")
    diff.add_argument("old", metavar="OLD", help="the pipeline file as it is")
    diff.add_argument("new", metavar="NEW", help="the changed pipeline file")
    diff.add_argument("inputs", nargs="*", metavar="INPUT",
                      help="NDJSON files or globs to replay (default: each file's own sources)")
    diff.add_argument("--format", choices=["text", "json"], default="text",
                      help="text (a readable report, the default) or json (everything, for machines)")
    diff.add_argument("--limit", type=int, default=10, metavar="N",
                      help="examples shown per kind of difference in the text report (default 10)")
    diff.set_defaults(handler=cmd_diff)

    replay = sub.add_parser(
        "replay", help="send a recording at its recorded pace (x speed) to a daemon, an MQTT broker or stdout",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Read a recording (files of timestamped messages: HSL's '<receive time> <topic> <JSON>' "
        "dumps, or NDJSON/CSV/log lines with a time field) in receive order across all its files, and send each "
        "message when it is due: at its recorded time since the first message, divided by --speed. A progress bar "
        "shows on a terminal. Exit code: 0 ok, 1 a target refused or could not be reached, 2 bad arguments.",
        epilog="targets:\n"
        "  -                          NDJSON on stdout (the default): edgewise replay rec.dump | edgewise run p.yaml\n"
        "  http://HOST:PORT[/path]    NDJSON posts to an edge daemon (/v1/events); pushback (429/503) is waited out\n"
        "  mqtt://HOST:PORT[/topic]   each event as JSON on topic; without a topic an hfp recording is published\n"
        "                             as recorded (each message's payload on its own topic)\n"
        "examples:\n"
        "  edgewise replay 'data/hsl-hfp-apc-dumps/*/hfp.dump' --speed max --dedupe-lines\n"
        "  edgewise replay rec/ --speed 60 --max-gap 5s --to http://127.0.0.1:8080 --token \"$TOKEN\"\n"
        "  edgewise replay clicks.ndjson --format ndjson --time-field ts --time-unit ms --to mqtt://127.0.0.1/clicks")
    replay.add_argument("recording", help="a file, a directory or a glob (quote it)")
    replay.add_argument("--to", default="-", metavar="TARGET", help="where to send: -, http://…, mqtt://… (see below)")
    replay.add_argument("--speed", default=1.0, type=_speed,
                        help="times the recorded pace (10 = ten times faster) or max (default 1)")
    replay.add_argument("--max-gap", default=None, metavar="DURATION",
                        help="shorten silences longer than this to this, e.g. 5s (recordings of different days)")
    replay.add_argument("--loop", action="store_true", help="start again at the end, until interrupted")
    replay.add_argument("--dedupe-lines", action="store_true",
                        help="leave out lines that overlapping recordings hold twice (same line, same receive time)")
    replay.add_argument("--format", default="hfp", choices=["hfp", "ndjson", "csv", "clf"],
                        help="the recording's line format (default hfp)")
    replay.add_argument("--time-field", default=None, metavar="FIELD",
                        help="the field holding the receive time (needed for ndjson, csv, clf)")
    replay.add_argument("--time-unit", default="s", choices=["s", "ms", "us"], help="of numeric receive times")
    replay.add_argument("--order", default="files", choices=["files", "time"],
                        help="files (default): each file as written, the files merged by receive time; time: read "
                        "the whole recording first and send it sorted by receive time (a recording not written in "
                        "time order, e.g. grouped per vehicle)")
    replay.add_argument("--token", default=os.environ.get("EDGEWISE_TOKEN"),
                        help="bearer token for an http target (default $EDGEWISE_TOKEN)")
    replay.add_argument("--progress", default="auto", choices=["auto", "on", "off"],
                        help="a progress bar on stderr (auto: on a terminal)")
    replay.add_argument("--quiet", "-q", action="store_true", help="no summary line on stderr")
    replay.set_defaults(handler=cmd_replay)

    binge = sub.add_parser(
        "import-binge", help="convert an agglo/binge JSON configuration into an edgewise pipeline file",
        description="Read an agglo/binge configuration (pipelines, processDefinitions, externalSystems) and print "
        "an edgewise pipeline file that validates: each process becomes steps, conditions become SQL, a `# binge:` "
        "comment marks each place where edgewise means something else, and what cannot be expressed is left out "
        "with a warning on stderr saying why. Exit code: 0 converted (warnings or not), 2 not a binge file.")
    binge.add_argument("config", metavar="AGGLO.json", help="the binge configuration")
    binge.add_argument("--output", "-o", metavar="FILE", help="write the pipeline file here instead of stdout")
    binge.set_defaults(handler=cmd_import_binge)

    from edgewise.entwine.cli import add_parsers as add_entwine_parsers

    add_entwine_parsers(sub)

    functions = sub.add_parser("functions", help="list the functions expressions may call")
    functions.add_argument("--markdown", action="store_true", help="as the reference table in docs/")
    functions.set_defaults(handler=cmd_functions)
    sub.finish()
    for command in sub.choices.values():  # `edgewise serve FILE --debug` as well as `edgewise --debug serve FILE`
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help="show the Python traceback of an internal error (also: EDGEWISE_DEBUG=1)")
    return parser


def _groups(text: str) -> frozenset[str]:
    from edgewise.daemon.readauth import parse_groups

    try:
        return parse_groups(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_run(args: argparse.Namespace) -> int:
    from edgewise.config import BuildContext, load
    from edgewise.engine.idle import unused_idle_timeouts
    from edgewise.engine.local import LocalEngine
    from edgewise.placement import part
    from edgewise.sources.stdin import StdinConfig, StdinSource

    plan = part(load(args.pipeline), args.part)
    for note in unused_idle_timeouts(plan.sources, "command mode"):
        print(f"edgewise: note: {note}", file=sys.stderr)
    sources = _given_or_declared_sources(plan, args.input) or [
        StdinSource(StdinConfig.model_construct(id="stdin"), BuildContext("."))]  # constants: made, not validated
    engine = LocalEngine(plan, pipelines=args.only, batch_size=max(1, args.batch_size),
                         commit_interval=max(0.0, args.commit_interval), fresh=args.fresh)
    collector.for_a_run()
    stats = engine.run(sources)
    if not args.quiet:
        outs = ", ".join(f"{k}: {v}" for k, v in stats.events_out.items()) or "none"
        print(f"edgewise: {count(stats.events_in, 'event')} in; out {outs}; {stats.failed} failed, "
              f"{stats.malformed} malformed, {stats.dead_lettered} dead-lettered", file=sys.stderr)
    return EXIT_OK if stats.ok else EXIT_FAILED


def _given_or_declared_sources(plan: Plan, input_path: str | None) -> list[Source] | None:
    """The NDJSON file given on the command line, else the file's own sources (their relative paths start at the
    pipeline file); None for standard input (``-``, or nothing given and nothing declared)."""
    from edgewise.config import BuildContext
    from edgewise.sources.file import FileSource, FileSourceConfig

    if input_path and input_path != "-":
        # made, not validated (a path is any text): a run whose file's configs came from the cache builds no schema
        return [FileSource(FileSourceConfig.model_construct(id="input", path=input_path), BuildContext("."))]
    if input_path == "-" or not plan.sources:
        return None
    return [plan.source(s) for s in plan.sources]


def cmd_bench(args: argparse.Namespace) -> int:
    import time

    from edgewise.bench import read_input, report, run_rounds
    from edgewise.config import load
    from edgewise.jsonio import dumps

    plan = load(args.pipeline)
    if args.rounds < 1 or (args.events is not None and args.events < 1) or args.batch_size < 1:
        raise ConfigError("--rounds, --events and --batch-size must be at least 1")
    sources = _given_or_declared_sources(plan, args.input)
    if sources is None:
        raise ConfigError("edgewise bench reads its input before timing, not from standard input: give an NDJSON "
                          "input file" if args.input == "-" else
                          f"{args.pipeline} declares no source: give an NDJSON input file")
    started = time.perf_counter()
    batches = read_input(sources, args.events, args.batch_size)
    read_seconds = time.perf_counter() - started
    events = sum(len(b) for b in batches)
    print(f"edgewise: {count(events, 'event', thousands=True)} read in {read_seconds:.2f} s; "
          f"{count(args.rounds, 'round')}", file=sys.stderr)

    def progress(r: int, seconds: float) -> None:
        print(f"edgewise: round {r + 1}/{args.rounds}: {events / seconds if seconds else 0:,.0f} events/s",
              file=sys.stderr)

    collector.for_a_run()
    result = run_rounds(plan, batches, args.rounds, read_seconds=read_seconds, only=args.only, on_round=progress)
    if args.json:
        sys.stdout.buffer.write(dumps({"pipeline": args.pipeline, **result.as_dict()}) + b"\n")
    else:
        print(report(result, f"edgewise bench {args.pipeline}: {count(events, 'event', thousands=True)}, local engine"))
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    from edgewise.daemon.server import Daemon, DaemonOptions

    if args.check_reload:
        return _check_reload(args)

    options = DaemonOptions(
        pipeline_file=args.pipeline, host=args.host, port=args.port, data_dir=args.data_dir, fsync=args.fsync,
        workers=max(1, args.workers), high_water=args.high_water, low_water=args.low_water,
        max_queue_bytes=args.max_queue_bytes, min_free=args.min_free, commit_interval=args.commit_interval,
        max_batch=max(1, args.max_batch), worker_nice=args.worker_nice, trace=args.trace,
        log_format=args.log_format, stateless=args.stateless,
        concurrency=args.concurrency, tls_cert=args.tls_cert, tls_key=args.tls_key, tls_client_ca=args.tls_client_ca,
        read_token_env=args.read_token_env, protect=args.protect, max_header_bytes=args.max_header_bytes,
        keep_recent=max(0, args.keep_recent))
    return Daemon(options).run()


def _check_reload(args: argparse.Namespace) -> int:
    from edgewise.daemon.check_reload import check_reload

    report, events = check_reload(args.pipeline, args.check_reload, args.data_dir)
    heading = f"replayed the daemon's recent input: {count(events, 'event', thousands=True)} from {args.data_dir}"
    return _show_diff(report, args.pipeline, args.check_reload, args.format, heading=heading)


def cmd_inspect(args: argparse.Namespace) -> int:
    from edgewise.daemon.inspect import inspect_dead_letters, inspect_queue, inspect_state

    if args.what == "queue":
        return inspect_queue(args.data_dir, args.limit, args.json)
    if args.what == "dead-letters":
        return inspect_dead_letters(args.data_dir, args.limit, args.json)
    if not args.pipeline:
        print("edgewise: inspect state needs the pipeline file", file=sys.stderr)
        return EXIT_CONFIG
    return inspect_state(args.pipeline, args.data_dir, args.step, args.limit, args.json)


def cmd_replay_dead_letters(args: argparse.Namespace) -> int:
    from edgewise.daemon.inspect import open_queue

    queue = open_queue(args.data_dir)
    n = queue.replay_dead_letters(args.numbers or None)
    queue.close()
    print(f"edgewise: {n} dead letters queued again; a running daemon processes them now, a stopped one when it "
          "starts")
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    from edgewise.config import load

    status = EXIT_OK
    for path in args.pipelines:
        try:
            plan = load(path)
        except ConfigError as exc:
            print(exc.render(), file=sys.stderr)
            status = EXIT_CONFIG
            continue
        try:
            from edgewise.placement import check_hub

            check_hub(plan)
        except ConfigError as exc:
            print(exc.render(), file=sys.stderr)
            status = EXIT_CONFIG
            continue
        steps = sum(len(p.steps) for p in plan.pipelines)
        print(f"{path}: ok ({count(len(plan.pipelines), 'pipeline')}, {count(steps, 'step')}, "
              f"{count(len(plan.sources), 'source')}, {count(len(plan.sinks), 'sink')})")
    return status


def cmd_explain(args: argparse.Namespace) -> int:
    from edgewise.config import load
    from edgewise.placement import explain as explain_placement
    from edgewise.placement import hub_to_run

    plan = load(args.pipeline)
    if args.engine == "local":
        from edgewise.engine.fused import explain_head

        print(plan.explain())
        fused = explain_head(plan)
        if fused is not None:
            print(fused)
        placement = explain_placement(plan)
        if placement:
            print(placement)
        return EXIT_OK
    plan = hub_to_run(plan)  # a split file's Spark plan is its hub's
    import tempfile

    from edgewise.engine.spark.job import SparkJob, SparkOptions
    from edgewise.engine.spark.quiet import quiet_stderr
    from edgewise.engine.spark.session import spark_session
    from edgewise.engine.spark.sources import check_plan

    check_plan(plan)  # before the JVM starts: what Spark cannot read is refused at its file and line
    with quiet_stderr(not args.verbose):
        spark = spark_session(None, app="edgewise-explain", short_lived=True)
    with tempfile.TemporaryDirectory(prefix="edgewise-explain-") as tmp:
        job = SparkJob(spark, plan, SparkOptions(checkpoint=args.checkpoint or tmp))
        print(job.explain())
    return EXIT_OK


def cmd_spark(args: argparse.Namespace) -> int:
    from edgewise.config import load
    from edgewise.engine.idle import unused_idle_timeouts
    from edgewise.engine.spark.quiet import quiet_stderr
    from edgewise.engine.spark.sources import check_plan
    from edgewise.progress import StatusLine

    if args.keep_open and not args.once:
        raise ConfigError("--keep-open goes with --once (a continuous job keeps its windows open anyway)")
    if args.print_submit:
        print(submit_command(args))
        return EXIT_OK
    from edgewise.placement import hub_to_run

    plan = hub_to_run(load(args.pipeline))  # of a file with split pipelines, the hub's part
    check_plan(plan)  # before the JVM starts: what Spark cannot read is refused at its file and line
    for note in unused_idle_timeouts(plan.sources, "Spark"):
        print(f"edgewise: note: {note}", file=sys.stderr)
    with quiet_stderr(not args.verbose) as terminal, StatusLine(None if args.quiet else terminal) as status:
        return _spark(args, plan, status)


PYTHON_ENV = "edgewise-env"
"""Where an executor unpacks ``--python-env`` (the archive's name in its working directory)."""


def python_env_conf(archive: str) -> dict[str, str]:
    """The Spark settings that ship a packed environment to the executors and run their Python from it."""
    return {"spark.archives": f"{os.path.abspath(archive)}#{PYTHON_ENV}",
            "spark.pyspark.python": f"./{PYTHON_ENV}/bin/python"}


def submit_command(args: argparse.Namespace) -> str:
    """The spark-submit command line running ``edgewise spark`` with ``args`` (``--print-submit``)."""
    import shlex
    import shutil

    from edgewise.engine.spark import submit

    command = [shutil.which("spark-submit") or _pyspark_submit() or "spark-submit"]
    if args.master:
        command += ["--master", args.master]
    if args.python_env:
        conf = python_env_conf(args.python_env)
        command += ["--archives", conf["spark.archives"],
                    "--conf", f"spark.pyspark.python={conf['spark.pyspark.python']}",
                    # the driver (spark-submit's client mode: here) keeps this interpreter, with edgewise
                    "--conf", f"spark.pyspark.driver.python={sys.executable}"]
    for item in args.conf:
        command += ["--conf", item]
    command += [os.path.abspath(submit.__file__), os.path.abspath(args.pipeline),
                "--checkpoint", os.path.abspath(args.checkpoint)]
    for flag in ("once", "keep_open", "quiet", "verbose"):
        if getattr(args, flag):
            command.append("--" + flag.replace("_", "-"))
    for only in args.only or []:
        command += ["--pipeline", only]
    if args.max_files_per_trigger is not None:
        command += ["--max-files-per-trigger", str(args.max_files_per_trigger)]
    if args.trigger:
        command += ["--trigger", str(args.trigger)]
    return shlex.join(command)


def _pyspark_submit() -> str | None:
    """PySpark's own spark-submit, where PySpark is installed (a virtualenv's bin may not be on PATH)."""
    import importlib.util

    found = importlib.util.find_spec("pyspark")
    if found is None or found.origin is None:
        return None
    path = os.path.join(os.path.dirname(found.origin), "bin", "spark-submit")
    return path if os.path.exists(path) else None


def _spark(args: argparse.Namespace, plan: Plan, status: StatusLine) -> int:
    from edgewise.engine.spark.job import SparkJob, SparkOptions, python_worker_modules
    from edgewise.engine.spark.session import local_cores, require_pyspark, session_active, spark_session
    from edgewise.engine.spark.workers import warm_python_workers

    require_pyspark()
    from edgewise.engine.spark.sources import check_plan, short_job

    conf: dict[str, str] = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--conf {item!r}: expected KEY=VALUE")
        conf[key] = value
    if args.python_env:
        if not os.path.isfile(args.python_env):
            raise ConfigError(f"--python-env {args.python_env}: no such file (a packed environment: docs/deploy.md)")
        conf = python_env_conf(args.python_env) | conf
    check_plan(plan)  # what Spark cannot read or run is refused before its JVM starts
    status.show("starting Spark")
    launching = not session_active()
    worker_modules = python_worker_modules(plan, args.only)
    spark = spark_session(args.master, app=f"edgewise {plan.name}", conf=conf,
                          report=lambda line: status.say(f"edgewise: {line}"),
                          short_lived=short_job(plan, args.once))
    slots = local_cores(spark.sparkContext.master or "")
    if launching and worker_modules and slots:  # this run's own local JVM: its Python workers start while it plans
        warm_python_workers(spark, worker_modules, slots)
    options = SparkOptions(checkpoint=args.checkpoint, once=args.once, max_files_per_trigger=args.max_files_per_trigger,
                           trigger_seconds=args.trigger, flush=not args.keep_open)
    status.show("typing the input and planning the queries")
    job = SparkJob(spark, plan, options, pipelines=args.only,
                   progress=None if args.quiet else lambda line: status.say(f"edgewise: {line}"),
                   running=status.show if status.enabled else None)  # no terminal: no status polls of the JVM
    count = len(job.compiled)
    status.say(f"edgewise: {count} pipeline{'' if count == 1 else 's'} on Spark {spark.version} "
               f"({spark.sparkContext.master}), checkpoint {os.path.abspath(args.checkpoint)}")
    import signal
    import threading

    stop = threading.Event()
    signalled: list[str] = []

    def request_stop(signum: int, frame: object) -> None:  # only a flag: never an exception inside a py4j call
        signalled.append(signal.Signals(signum).name)
        stop.set()

    handlers = {} if args.once else {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        job.run(stop)
    except KeyboardInterrupt:  # --once: Ctrl-C ends the run (its micro-batch is redone by the next)
        job.stop()
        print("edgewise: stopped; the next run resumes from the checkpoint", file=sys.stderr)
        return 130
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    if signalled:
        print(f"edgewise: stopped on {signalled[0]}; the next run resumes from the checkpoint", file=sys.stderr)
    written: dict[str, int] = {}
    for c in job.compiled:
        for sink, n in c.writer.stats.written.items():
            written[sink] = written.get(sink, 0) + n
    summary = ", ".join(f"{n} to {sink}" for sink, n in sorted(written.items())) or "nothing written"
    print(f"edgewise: done: {summary}", file=sys.stderr)
    malformed = sum(c.writer.stats.malformed for c in job.compiled)
    return EXIT_FAILED if malformed else EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    import json

    from edgewise.config.schema import pipeline_file_schema

    print(json.dumps(pipeline_file_schema(), indent=2))
    return EXIT_OK


def cmd_test(args: argparse.Namespace) -> int:
    from edgewise.engine.spark.quiet import quiet_stderr  # no PySpark needed: it only filters fd 2
    from edgewise.testing.fixtures import run_fixture_files

    with quiet_stderr(args.engine == "spark" and not args.verbose):
        report = run_fixture_files(args.paths, engine=args.engine)
    for r in report.results:
        mark = "ok  " if r.ok else "n/a " if r.unsupported else "FAIL"
        print(f"{mark} {r.file} :: {r.name}")
        if not r.ok:
            for line in r.message.splitlines():
                print(f"     {line}")
    extra = f", {report.unsupported} not available on {args.engine}" if report.unsupported else ""
    print(f"{report.passed} passed, {report.failed} failed{extra}")
    if not report.results:
        print("edgewise: no fixture files (*.test.yaml) found", file=sys.stderr)
        return EXIT_CONFIG
    return EXIT_OK if report.failed == 0 else EXIT_FAILED


def cmd_diff(args: argparse.Namespace) -> int:
    from edgewise.diff import diff_files

    return _show_diff(diff_files(args.old, args.new, args.inputs), args.old, args.new, args.format,
                      limit=max(0, args.limit))


def _show_diff(report: DiffReport, old: str, new: str, form: str, *, limit: int = 10, heading: str = "") -> int:
    """A diff report on stdout (``form``: text or json); the exit code: 0 equal, 1 different."""
    from edgewise.diff import as_json, render_text

    if form == "json":
        import json

        print(json.dumps(as_json(report), ensure_ascii=False, indent=1))
    else:
        if heading:
            print(heading)
        for line in render_text(report, old, new, limit=limit):
            print(line)
    return EXIT_OK if report.equal else EXIT_FAILED


def cmd_import_binge(args: argparse.Namespace) -> int:
    from edgewise.binge import convert
    from edgewise.config import load_text_plan
    from edgewise.jsonio import load_json_file

    converted = convert(load_json_file(args.config))
    target = args.output or "<import-binge>"
    # the promise is a file that validates: a conversion that does not is edgewise's bug, not the user's. A
    # program a spawner runs that is not on this machine is the one exception, said as a warning
    try:
        load_text_plan(converted.text, file=target, base_dir=os.path.dirname(os.path.abspath(args.output or ".")))
    except ConfigError as exc:
        problems = exc.problems or [exc]
        if not all(p.message.startswith("argv[0]") for p in problems):
            raise
        converted.warnings += [f"{p.render()} on this machine: install the program the binge spawner ran, or "
                               "change the spawn step's argv" for p in problems]
    for warning in converted.warnings:
        print(f"edgewise: warning: {warning}", file=sys.stderr)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(converted.text)
    else:
        sys.stdout.write(converted.text)
    return EXIT_OK


def _speed(text: str) -> float | str:
    """``--speed``: a number above 0, or max."""
    if text == "max":
        return text
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number above 0 or max, found {text!r}")
    return value


def cmd_replay(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from edgewise.replay import replay
    from edgewise.sources.replay import ReplaySourceConfig

    try:
        config = ReplaySourceConfig(
            id="replay", path=args.recording, format=args.format, time_field=args.time_field,
            time_unit=args.time_unit, speed=args.speed, max_gap=args.max_gap, loop=args.loop,
            dedupe_lines=args.dedupe_lines, order=args.order, progress=args.progress)
    except ValidationError as exc:
        problems = "; ".join(f"--{'-'.join(str(p) for p in e['loc']).replace('_', '-')}: {e['msg']}"
                             if e["loc"] else e["msg"] for e in exc.errors())
        print(f"edgewise: {problems}", file=sys.stderr)
        return EXIT_CONFIG
    report = replay(config, args.to, token=args.token)
    if not args.quiet:
        dupes = f", {report.duplicates} duplicate lines left out" if args.dedupe_lines else ""
        print(f"edgewise: replayed {count(report.sent, 'message')} in {report.seconds:.1f} s{dupes}; "
              f"{report.malformed} malformed", file=sys.stderr)
    return EXIT_OK if report.malformed == 0 else EXIT_FAILED


def cmd_functions(args: argparse.Namespace) -> int:
    from edgewise.expr.functions import FUNCTIONS

    specs = sorted(FUNCTIONS.values(), key=lambda s: (s.category, s.name))
    if args.markdown:
        print("| function | arguments | category | what it does |\n|---|---|---|---|")
        for s in specs:
            print(f"| `{s.name}` | {s.arity_text()} | {s.category} | {s.doc.splitlines()[0] if s.doc else ''} |")
    else:
        for s in specs:
            print(f"{s.name:<22} {s.category:<12} {s.doc.splitlines()[0] if s.doc else ''}")
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
