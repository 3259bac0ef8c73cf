"""Turn pydantic validation errors into located, human ``ConfigError``s.

pydantic is imported where a value is validated, not with this module: a run whose configs all come from the
validated cache (``validated_cache.py``) never imports it."""

from __future__ import annotations

from typing import Any

from edgewise.config.yamlpos import Document, Path
from edgewise.declare import Model
from edgewise.errors import ConfigError


def _found(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _message(err: Any, model: type[Model], loc: tuple[Any, ...]) -> str:
    kind = err["type"]
    if kind == "missing":
        return f"missing required field {str(loc[-1])!r}" if loc else "missing required field"
    if kind == "extra_forbidden":
        from edgewise.config.mirror import mirror

        allowed = _allowed_fields(mirror(model), loc[:-1])
        hint = f"; expected one of: {', '.join(allowed)}" if allowed else ""
        return f"unknown field {str(loc[-1])!r}{hint}"
    msg: str = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
        return msg
    if kind == "literal_error":
        return f"expected {msg.removeprefix('Input should be ')}, found {_found(err.get('input'))}"
    msg = msg.replace("Input should be", "expected").replace("String should", "expected a string to")
    return f"{msg[0].lower()}{msg[1:]}, found {_found(err.get('input'))}"


def _allowed_fields(model: type[Any], loc: tuple[Any, ...]) -> list[str]:
    from pydantic import BaseModel

    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = _fields_as_written(current).get(str(part))
        if field is None:
            return []
        current = _inner_model(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(_fields_as_written(current))
    return []


def _fields_as_written(model: Any) -> dict[str, Any]:
    """A model's fields by the key a file gives them: the alias where there is one (``schema``, not
    ``declared_schema``), as pydantic names them in its errors' locations."""
    return {field.alias or name: field for name, field in model.model_fields.items()}


def _inner_model(annotation: Any) -> Any:
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def validate_model(model: type[Model], doc: Document, path: Path) -> Any:
    """Validate the value at ``path`` of ``doc`` against ``model``; every error is located (pydantic's
    ``ValidationError`` turned into ``ConfigError``s)."""
    from pydantic import ValidationError

    data = doc.data
    for part in path:
        data = data[part]
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
            problems.append(ConfigError(_message(err, model, loc), doc.locate((*path, *loc))))
        if len(problems) == 1:
            raise problems[0] from None
        raise ConfigError(problems[0].message, problems[0].location, problems=problems) from None
