"""The JSON Schema of pipeline files, assembled from every plugin's model (``edgewise schema``)."""

from __future__ import annotations

from typing import Any

from edgewise.config import registry
from edgewise.config.models import PipelineConfig, PipelineFileConfig


def _schema(model: Any, defs: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = model.model_json_schema(ref_template="#/$defs/{model}")
    defs.update(schema.pop("$defs", {}))
    return schema


def pipeline_file_schema() -> dict[str, Any]:
    defs: dict[str, Any] = {}
    top = _schema(PipelineFileConfig, defs)
    pipeline = _schema(PipelineConfig, defs)
    steps = []
    for name in registry.names("steps"):
        config = registry.resolve("steps", name).Config
        defs[config.__name__] = _schema(config, defs)
        steps.append({"type": "object", "properties": {name: {"$ref": f"#/$defs/{config.__name__}"}},
                      "required": [name], "additionalProperties": False})
    pipeline["properties"]["steps"] = {"type": "array", "items": {"oneOf": steps}}
    defs["PipelineConfig"] = pipeline
    kinds: tuple[registry.Kind, ...] = ("sources", "sinks")
    for kind in kinds:
        options = []
        for name in registry.names(kind):
            config = registry.resolve(kind, name).Config
            defs[config.__name__] = _schema(config, defs)
            options.append({"$ref": f"#/$defs/{config.__name__}"})
        top["properties"][kind] = {"type": "array", "items": {"oneOf": options}}
    from edgewise.state import STORE_CONFIGS

    stores = []
    for config in STORE_CONFIGS.values():
        defs[config.__name__] = _schema(config, defs)
        stores.append({"$ref": f"#/$defs/{config.__name__}"})
    top["properties"]["state"] = {"type": "object", "additionalProperties": {"oneOf": stores},
                                  "description": top["properties"]["state"].get("description", "")}
    top["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    top["title"] = "edgewise pipeline file"
    top["$defs"] = defs
    return top
