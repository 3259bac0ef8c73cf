"""The one exception tree of edgewise.

::

    EdgewiseError                 root: catch this to catch everything edgewise raises on purpose
    ├── ConfigError               the pipeline file (or a fixture file) is invalid; carries file/line/path
    ├── PluginError               a plugin could not be loaded (missing extra, bad entry point)
    ├── EvalError                 an expression failed for one event (division by zero, bad cast, ...)
    ├── StepError                 a step failed for one event (spawn exit code, timeout, ...)
    ├── EventsFailed              a stateful step ran a batch in which some events failed (each changed nothing)
    ├── SourceError               a source could not read its input (malformed record, a broker down)
    │   └── InputMissing          the input a command was given is not there (no file matches a path)
    └── SinkError                 a sink could not deliver after its retries

Operators see ``ConfigError`` and ``PluginError`` at start-up and should fix the file or install the extra named
in the message. ``EvalError`` and ``StepError`` are per event: the step's ``on_error`` decides what happens to the
event, they never stop the run by themselves. ``SinkError`` is raised only after the sink's retries are spent;
with ``on_error: <sink id>`` the batch is dead-lettered instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgewise.wording import count


class EdgewiseError(Exception):
    """Root of every error edgewise raises on purpose."""


@dataclass(frozen=True)
class Location:
    """Where a config problem is: file, 1-based line and column, and the field path (``pipelines[0].id``)."""

    file: str
    line: int | None = None
    column: int | None = None
    path: str = ""

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return f"{where}: {self.path}" if self.path else where


class ConfigError(EdgewiseError):
    """The pipeline file is invalid. Raised at load time, before any event is read.

    The message names the file, line, field path, what was expected and what was found. Fix the file and run
    ``edgewise validate`` again. Several problems found in one pass are reported together (``problems``).
    """

    def __init__(self, message: str, location: Location | None = None, *, problems: list[ConfigError] | None = None):
        self.message = message
        self.location = location
        self.problems = problems or []
        super().__init__(self.render())

    @staticmethod
    def of(problems: list[ConfigError]) -> ConfigError:
        """One error for several problems (the first names where; ``render`` lists them all)."""
        if len(problems) == 1:
            return problems[0]
        return ConfigError(problems[0].message, problems[0].location, problems=problems)

    def render(self) -> str:
        if self.problems:
            return "\n".join(p.render() for p in self.problems)
        return f"{self.location}: {self.message}" if self.location else self.message


class PluginError(EdgewiseError):
    """A plugin could not be loaded, usually because an optional extra is not installed.

    The message says which ``pip install 'edgewise[extra]'`` fixes it.
    """


class EvalError(EdgewiseError):
    """An expression failed for one event.

    ``error_class`` mirrors Spark's error class (``DIVIDE_BY_ZERO``, ``CAST_INVALID_INPUT``, ...), so the local
    engine and Spark report the same failure the same way. Only that event fails; the step's ``on_error`` applies.
    """

    def __init__(self, error_class: str, message: str):
        self.error_class = error_class
        self.message = message
        super().__init__(f"[{error_class}] {message}")


class StepError(EdgewiseError):
    """A step failed for one event for a reason other than an expression (a program exited non-zero, timed out,
    printed invalid JSON). The step's ``on_error`` applies."""


class EventsFailed(EdgewiseError):
    """A stateful step processed a batch in which some events failed.

    A stateful step cannot be re-run on events it already counted, so it isolates failures itself: every other
    event was processed (``output`` is what they gave) and each failed event changed no state. ``failures`` maps
    the failed events' positions in the input batch to their errors; the engine applies ``on_error`` to each.
    """

    def __init__(self, output: object, failures: dict[int, EvalError | StepError]):
        self.output = output
        self.failures = failures
        first = next(iter(failures.values()))
        super().__init__(f"{count(len(failures), 'event')} failed, the first: {first}")


class SourceError(EdgewiseError):
    """A source could not read its input: a file is missing, or a record is malformed (the message names the
    record's position). Malformed records are reported and skipped; the rest of the input is still processed."""


class InputMissing(SourceError):
    """The input named on the command line or in a source is not there: nothing was read, so the command stops with
    exit 2, as for a pipeline file that is not there (the invocation is wrong, not the data)."""


class SinkError(EdgewiseError):
    """A sink could not deliver a batch after all its retries. With ``on_error: <sink id>`` on the sink the batch
    is dead-lettered there instead of raising."""
