"""How config classes are declared, without importing pydantic: a run of values validated before needs none.

A config class is written as a pydantic model is (``Field``, ``model_validator``, ``field_validator``,
``Annotated`` types with ``AfterValidator``, ``BeforeValidator`` and ``WithJsonSchema``), but every name here is a
plain record of what was written. pydantic still does all the validating: the first time a class validates (or
gives its JSON Schema, or dumps) ``mirror.py`` builds a pydantic model from the declaration, lets it validate and
turns its result into an instance of the declared class. A run whose configs come from the validated cache
(``validated_cache.py``) unpickles instances of these classes and never imports pydantic, which was about two thirds
of the instructions of ``edgewise run`` on a one-line file (BENCHMARKS.md, "Start-up").

Instances are frozen; their fields are attributes; equality is the class and the values, as with pydantic. The few
model methods the engine uses (``model_validate``, ``model_construct``, ``model_copy``, ``model_dump``,
``model_dump_json``, ``model_validate_json``, ``model_json_schema``) keep pydantic's names and meanings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal, TypeVar, dataclass_transform

REQUIRED: Any = type("Required", (), {"__repr__": lambda self: "REQUIRED"})()
"""The default of a field without one (pydantic's ``PydanticUndefined``)."""

SelfT = TypeVar("SelfT", bound="Model")


class FieldSpec:
    """What ``Field(...)`` was given: a field's default and pydantic's field options, kept to be passed on."""

    __slots__ = ("default", "default_factory", "options")

    def __init__(self, default: Any, default_factory: Callable[[], Any] | None, options: dict[str, Any]) -> None:
        self.default = default
        self.default_factory = default_factory
        self.options = options


def Field(default: Any = REQUIRED, *, default_factory: Callable[[], Any] | None = None,
          alias: str | None = None, description: str | None = None, **options: Any) -> Any:
    """pydantic's ``Field``: a default (or ``default_factory``), ``alias``, ``description`` and constraints
    (``ge``, ``min_length``, ``pattern``, ``discriminator``, ...), checked by pydantic when the class validates."""
    if alias is not None:
        options["alias"] = alias
    if description is not None:
        options["description"] = description
    return FieldSpec(default, default_factory, options)


class Marker:
    """``AfterValidator``, ``BeforeValidator`` or ``WithJsonSchema`` in an ``Annotated`` type: pydantic's class of
    that name, made with the same arguments when the mirror is built."""

    __slots__ = ("args", "kind")

    def __init__(self, kind: str, *args: Any) -> None:
        self.kind = kind
        self.args = args


def AfterValidator(function: Callable[[Any], Any]) -> Any:
    return Marker("AfterValidator", function)


def BeforeValidator(function: Callable[[Any], Any]) -> Any:
    return Marker("BeforeValidator", function)


def WithJsonSchema(schema: dict[str, Any]) -> Any:
    return Marker("WithJsonSchema", schema)


class Validator:
    """A method decorated with ``model_validator`` or ``field_validator``; the mirror decorates it with pydantic's."""

    __slots__ = ("fields", "function", "kind", "mode")

    def __init__(self, kind: str, fields: tuple[str, ...], mode: str, function: Any) -> None:
        self.kind = kind
        self.fields = fields
        self.mode = mode
        self.function = function


def model_validator(*, mode: Literal["before", "after", "wrap", "plain"]) -> Callable[[Any], Any]:
    """pydantic's ``model_validator``: the method runs when the class validates."""
    return lambda function: Validator("model_validator", (), mode, function)


def field_validator(*fields: str, mode: Literal["before", "after", "wrap", "plain"] = "after",
                    ) -> Callable[[Any], Any]:
    """pydantic's ``field_validator``: the (class) method checks or converts those fields' values."""
    return lambda function: Validator("field_validator", fields, mode, function)


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(Field,))
class Model:
    """Base of every config class: unknown fields are errors, values are immutable after loading."""

    # pydantic's model config, given to the mirror. defer_build: a mirror builds its schema when it first validates
    model_config: ClassVar[dict[str, Any]] = {"extra": "forbid", "frozen": True, "defer_build": True}

    __slots__ = ("_fields_set",)

    def __init__(self, **data: Any) -> None:
        """Validate ``data`` (pydantic's ``ValidationError`` if it does not fit), as a pydantic model's does."""
        validated = type(self).model_validate(data)
        self.__dict__.update(validated.__dict__)
        object.__setattr__(self, "_fields_set", validated.model_fields_set)

    @classmethod
    def model_validate(cls: type[SelfT], data: Any) -> SelfT:
        from edgewise.config import mirror

        return mirror.validate(cls, data)

    @classmethod
    def model_validate_json(cls: type[SelfT], text: str | bytes) -> SelfT:
        from edgewise.config import mirror

        return mirror.validate_json(cls, text)

    @classmethod
    def model_json_schema(cls, **options: Any) -> dict[str, Any]:
        from edgewise.config import mirror

        schema: dict[str, Any] = mirror.mirror(cls).model_json_schema(**options)
        return schema

    @classmethod
    def model_construct(cls: type[SelfT], **values: Any) -> SelfT:
        """An instance of these values, not validated, the other fields at their defaults (pydantic's meaning)."""
        filled: dict[str, Any] = {}
        for name, spec in declared_fields(cls).items():
            if name in values:
                filled[name] = values[name]
            elif spec.default_factory is not None:
                filled[name] = spec.default_factory()
            elif spec.default is not REQUIRED:
                filled[name] = spec.default
        return restore(cls, filled, set(values))

    def model_copy(self: SelfT, *, update: dict[str, Any] | None = None) -> SelfT:
        """A shallow copy with ``update``'s values, not validated (pydantic's meaning)."""
        update = update or {}
        return restore(type(self), {**self.__dict__, **update}, self.model_fields_set | set(update))

    def model_dump(self, **options: Any) -> dict[str, Any]:
        from edgewise.config import mirror

        dumped: dict[str, Any] = mirror.as_mirror(self).model_dump(**options)
        return dumped

    def model_dump_json(self, **options: Any) -> str:
        from edgewise.config import mirror

        dumped: str = mirror.as_mirror(self).model_dump_json(**options)
        return dumped

    @property
    def model_fields_set(self) -> set[str]:
        """The fields given values (not defaults) when it was made."""
        found: set[str] = getattr(self, "_fields_set", set())
        return found

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: {name} cannot be set")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: {name} cannot be deleted")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__

    def __hash__(self) -> int:
        return hash((type(self), *self.__dict__.values()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"

    def __reduce__(self) -> tuple[Any, ...]:
        return restore, (type(self), self.__dict__, self.model_fields_set)


def restore(cls: type[SelfT], values: dict[str, Any], fields_set: set[str]) -> SelfT:
    """An instance of these values, not validated: from its pickle (``Model.__reduce__``), from a validated mirror
    (``mirror.declared``), or made in code (``model_construct``, ``model_copy``)."""
    made = cls.__new__(cls)
    made.__dict__.update(values)
    object.__setattr__(made, "_fields_set", fields_set)
    return made


_FIELDS: dict[type, dict[str, FieldSpec]] = {}


def declared_fields(cls: type[Model]) -> dict[str, FieldSpec]:
    """Every field of a config class, its bases' first, in declaration order, with its default."""
    known = _FIELDS.get(cls)
    if known is not None:
        return known
    fields: dict[str, FieldSpec] = {}
    for klass in reversed(cls.__mro__):
        for name, annotation in vars(klass).get("__annotations__", {}).items():
            if _is_class_var(annotation):
                continue
            value = vars(klass).get(name, REQUIRED)
            fields[name] = value if isinstance(value, FieldSpec) else FieldSpec(value, None, {})
    _FIELDS[cls] = fields
    return fields


def _is_class_var(annotation: Any) -> bool:
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return text.startswith(("ClassVar", "typing.ClassVar"))
