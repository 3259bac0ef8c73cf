"""The pydantic model of a declared config class (``declare.py``), built on first use, and the way between the two.

The mirror has the declared class's name, docstring, fields (each ``Field``, ``Annotated`` marker and nested config
class replaced by pydantic's own), validators (decorated with pydantic's), methods and class variables, so pydantic
validates, reports errors and writes the JSON Schema exactly as it would for the class written against it.
``validate`` gives an instance of the declared class, nested configs included; ``as_mirror`` goes the other way,
for pydantic's dumps.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from functools import reduce
from operator import or_
from typing import Annotated, Any, TypeVar

import pydantic

from edgewise.declare import REQUIRED, FieldSpec, Marker, Model, Validator, restore

ModelT = TypeVar("ModelT", bound=Model)

_OWN = ("__module__", "__qualname__", "__doc__", "__annotations__", "__dict__", "__weakref__", "__slots__")


_MIRRORS: dict[type, type[pydantic.BaseModel]] = {}


def mirror(cls: type[Model]) -> type[pydantic.BaseModel]:
    """The pydantic model of ``cls`` (built once per class)."""
    known = _MIRRORS.get(cls)
    if known is None:
        known = _MIRRORS[cls] = _built(cls)
    return known


def _built(cls: type[Model]) -> type[pydantic.BaseModel]:
    foreign = [base.__name__ for base in cls.__bases__ if not issubclass(base, Model)]
    if foreign:  # the mirror copies only config classes: a mixin's methods would be missing from it, silently
        raise TypeError(f"config class {cls.__qualname__} has bases that are not config classes ({', '.join(foreign)});"
                        " put shared fields and methods in a subclass of edgewise.declare.Model")
    bases = tuple(mirror(base) for base in cls.__bases__ if base is not Model)
    hints = typing.get_type_hints(cls, include_extras=True)
    own = vars(cls).get("__annotations__", {})
    namespace: dict[str, Any] = {
        "__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__,
        "__annotations__": {name: pydantic_type(hints[name]) for name in own},
        "__edgewise_declared__": cls,
    }
    for name, value in vars(cls).items():
        if name in _OWN or (name.startswith("__") and name.endswith("__") and name not in own):
            continue
        namespace[name] = _pydantic_value(value)
    if not bases:
        namespace["model_config"] = dict(cls.model_config)  # pydantic's ConfigDict is a TypedDict
    made = types.new_class(cls.__name__, bases or (pydantic.BaseModel,), exec_body=lambda ns: ns.update(namespace))
    return typing.cast(type[pydantic.BaseModel], made)


def validate(cls: type[ModelT], data: Any) -> ModelT:
    """``data`` validated by the mirror of ``cls``, as an instance of ``cls``; pydantic's ``ValidationError``. Configs
    in ``data`` (``HttpSinkConfig(retry=RetryPolicy(...))``) are taken as they are, as pydantic takes its models."""
    return typing.cast(ModelT, declared(mirror(cls).model_validate(as_mirror(data))))


def validate_json(cls: type[ModelT], text: str | bytes) -> ModelT:
    return typing.cast(ModelT, declared(mirror(cls).model_validate_json(text)))


def pydantic_type(annotation: Any) -> Any:
    """An annotation with each declared config class as its mirror and each marker as pydantic's own."""
    if isinstance(annotation, type) and issubclass(annotation, Model):
        return mirror(annotation)
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        inner, *metadata = typing.get_args(annotation)
        return Annotated[(pydantic_type(inner), *(_pydantic_value(m) for m in metadata))]
    if origin is typing.Literal or origin is typing.ClassVar:
        return annotation
    args = typing.get_args(annotation)
    mirrored = tuple(pydantic_type(arg) for arg in args)
    if all(a is b for a, b in zip(args, mirrored, strict=True)):
        return annotation
    if origin is types.UnionType or origin is typing.Union:
        return reduce(or_, mirrored)
    if isinstance(annotation, types.GenericAlias):
        return types.GenericAlias(origin, mirrored)
    return annotation.copy_with(mirrored)


def _pydantic_value(value: Any) -> Any:
    """A class attribute or ``Annotated`` metadata of the declaration as pydantic takes it."""
    if isinstance(value, FieldSpec):
        if value.default_factory is not None:
            return pydantic.Field(default_factory=value.default_factory, **value.options)
        if value.default is REQUIRED:
            return pydantic.Field(**value.options)
        return pydantic.Field(value.default, **value.options)
    if isinstance(value, Marker):
        return getattr(pydantic, value.kind)(*value.args)
    if isinstance(value, Validator):
        decorate = getattr(pydantic, value.kind)
        return (decorate(*value.fields, mode=value.mode) if value.fields else decorate(mode=value.mode))(value.function)
    return value


def declared(value: Any) -> Any:
    """A validated value with each mirror instance in it made an instance of its declared class."""
    if isinstance(value, pydantic.BaseModel):
        cls = getattr(type(value), "__edgewise_declared__", None)
        if cls is None:
            return value
        return restore(cls, {name: declared(v) for name, v in value.__dict__.items()}, set(value.model_fields_set))
    return _inside(value, declared)


def as_mirror(value: Any) -> Any:
    """``declared``'s inverse: declared instances as instances of their mirrors (for pydantic's dumps)."""
    if isinstance(value, Model):
        converted = {name: as_mirror(v) for name, v in value.__dict__.items()}
        return mirror(type(value)).model_construct(_fields_set=set(value.model_fields_set), **converted)
    return _inside(value, as_mirror)


def _inside(value: Any, convert: Callable[[Any], Any]) -> Any:
    """A list's, dict's or tuple's items converted (a copy); any other value as it is."""
    if isinstance(value, list):
        return [convert(v) for v in value]
    if isinstance(value, dict):
        return {k: convert(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(convert(v) for v in value)
    return value
