"""``spawn`` runs a program for each event: argv list (never a shell), the event as JSON on stdin.

With ``wait: true`` (the default) the program's stdout must be one JSON value, written under ``into`` (or, when
``into`` is not given, replacing the payload if it is an object); a program that prints nothing (blank output) leaves
the event as it was, as binge did (agglo's ``printvals`` and other watchers only log). A non-zero exit, a timeout or
invalid JSON fails the event (``on_error`` applies) with the program's stderr in the message. With ``wait: false``
the program is started and the event passes on at once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, ClassVar

import orjson

from edgewise.config import BuildContext
from edgewise.config.models import StepConfig
from edgewise.declare import Field
from edgewise.durations import Duration
from edgewise.engine.context import RunContext
from edgewise.errors import ConfigError, StepError
from edgewise.events import Batch, Payload
from edgewise.jsonio import dumps
from edgewise.steps.annotate import set_path, split_path
from edgewise.steps.base import Step

NOTHING: Any = object()
"""What a program that printed nothing gave: the event goes on unchanged."""


class SpawnConfig(StepConfig):
    """Run a program per event."""

    argv: list[str] = Field(min_length=1, description="program and arguments; no shell is involved")
    wait: bool = Field(default=True, description="wait for the program and use its JSON output")
    into: str | None = Field(default=None, description="field for the program's JSON output (default: it replaces the "
                             "payload, and must then be an object)")
    timeout: Duration = Field(default=10_000_000, description="how long the program may run before it is killed")
    env: dict[str, str] | None = Field(default=None, description="extra environment variables for the program")


class SpawnStep(Step):
    kind: ClassVar[str] = "spawn"
    Config = SpawnConfig
    per_event = True

    def __init__(self, config: SpawnConfig, argv: list[str]) -> None:
        super().__init__(config)
        self.argv = argv
        self.wait = config.wait
        self.into = split_path(config.into) if config.into else None
        self.timeout_s = config.timeout / 1_000_000
        self.env = {**os.environ, **config.env} if config.env else None
        self._children: list[subprocess.Popen[bytes]] = []

    @classmethod
    def from_config(cls, config: SpawnConfig, ctx: BuildContext) -> SpawnStep:
        program = config.argv[0]
        if os.sep in program:
            resolved = ctx.path(program) if not os.path.isabs(program) else program
            if not os.access(resolved, os.X_OK):
                raise ConfigError(f"argv[0] {program!r} is not an executable file")
        else:
            found = shutil.which(program)
            if found is None:
                raise ConfigError(f"argv[0] {program!r} is not on PATH")
            resolved = program
        return cls(config, [resolved, *config.argv[1:]])

    def _run_one(self, payload: Payload) -> Any:
        data = dumps(payload)
        if not self.wait:
            proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, env=self.env, start_new_session=True)
            assert proc.stdin is not None
            try:
                proc.stdin.write(data)
                proc.stdin.close()
            except BrokenPipeError:
                pass
            self._children = [c for c in self._children if c.poll() is None]  # reap the finished ones
            self._children.append(proc)
            return None
        try:
            done = subprocess.run(self.argv, input=data, capture_output=True, timeout=self.timeout_s,
                                  env=self.env, check=False)
        except subprocess.TimeoutExpired:
            raise StepError(f"spawn {self.id}: {self.argv[0]} did not finish within {self.timeout_s:g}s") from None
        except OSError as exc:
            raise StepError(f"spawn {self.id}: cannot run {self.argv[0]}: {exc.strerror}") from None
        if done.returncode != 0:
            err = done.stderr.decode("utf-8", "replace").strip()[-500:]
            raise StepError(f"spawn {self.id}: {self.argv[0]} exited with {done.returncode}"
                            + (f": {err}" if err else ""))
        if not done.stdout.strip():
            return NOTHING
        try:
            return orjson.loads(done.stdout)
        except orjson.JSONDecodeError:
            shown = done.stdout[:200].decode("utf-8", "replace")
            raise StepError(f"spawn {self.id}: {self.argv[0]} did not print one JSON value; it printed "
                            f"{shown!r}") from None

    def process(self, batch: Batch, ctx: RunContext) -> Batch:
        out: list[Payload] = []
        for p in batch.payloads:
            result = self._run_one(p)
            if not self.wait or result is NOTHING:
                out.append(p)
            elif self.into is not None:
                out.append(set_path(p, self.into, result))
            elif isinstance(result, dict):
                out.append(result)
            else:
                raise StepError(f"spawn {self.id}: without `into` the program must print a JSON object, "
                                f"it printed a {type(result).__name__}")
        return batch.replace(out)

    def close(self) -> None:
        """Wait for programs started with ``wait: false`` (up to ``timeout``), so none is left a zombie."""
        for child in self._children:
            try:
                child.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        self._children = []

    def describe(self) -> list[str]:
        target = f"into {'.'.join(self.into)}" if self.into else "replacing the event"
        mode = f"wait {self.timeout_s:g}s, {target}" if self.wait else "no wait"
        return [f"{self.head()}: run {self.argv} ({mode})"]
