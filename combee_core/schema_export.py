"""JSON Schemas of the wire models, generated from the pydantic models and checked in under ``schemas/``."""

from __future__ import annotations

from pathlib import Path

import orjson

from combee_core.topology import wire_models

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def render_schemas() -> dict[str, bytes]:
    """File name -> schema bytes (pretty, sorted keys, trailing newline) for every wire model."""
    rendered: dict[str, bytes] = {}
    for name, model in wire_models().items():
        schema = model.model_json_schema(mode="validation")
        schema["$schema"] = SCHEMA_DIALECT
        schema["$id"] = f"https://combee.dev/schemas/{name}.v1.json"
        rendered[f"{name}.v1.json"] = orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    return rendered


def write_schemas(directory: Path) -> list[Path]:
    """Write every schema into ``directory``; returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for file_name, content in render_schemas().items():
        path = directory / file_name
        path.write_bytes(content)
        written.append(path)
    return written


def schema_drift(directory: Path) -> list[str]:
    """Names of schema files in ``directory`` that are missing or differ from the models (empty when in sync)."""
    drifted = []
    for file_name, content in render_schemas().items():
        path = directory / file_name
        if not path.exists() or path.read_bytes() != content:
            drifted.append(file_name)
    return drifted
