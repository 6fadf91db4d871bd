"""Typed configs: YAML files plus `--set key=value` overrides, loaded into dataclasses.

Every error names the file and the dotted key (`rewards.0.weight`), so a typo in a config is
caught before any model loads. Values given with `--set` are parsed as YAML scalars, so
`--set grpo.learning_rate=1e-6` is a float and `--set data.limit=null` is None.

`null` unsets a key whose value cannot be null: it takes its default, and an entry of a mapping of names
(`data.columns: {answer: null}`) is removed. That is how a config undoes what its `base:` file set. A key that
may be null (`data.limit`, `data.instruction`, any `grpo:` option) keeps null as its value.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from coreward.runtime.errors import CorewardError


T = TypeVar("T")


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping, with errors that name the file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise CorewardError(f"cannot read config file {path}: {err.strerror or err}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise CorewardError(f"config file {path} is not valid YAML: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise CorewardError(f"config file {path} must hold a mapping at the top level, not {type(data).__name__}")
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str] | None, source: str = "--set") -> dict[str, Any]:
    """Apply `a.b.c=value` overrides in place (list items by index: `rewards.0.weight=2`)."""
    for item in overrides or []:
        if "=" not in item:
            raise CorewardError(f"{source} {item!r}: expected KEY=VALUE")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        parts = key.strip().split(".")
        node: Any = data
        for depth, part in enumerate(parts[:-1]):
            node = _child(node, part, create=True, key=".".join(parts[: depth + 1]), source=source)
        last = parts[-1]
        if isinstance(node, list):
            node[_index(node, last, key, source)] = value
        else:
            node[last] = value
    return data


def _index(node: list, part: str, key: str, source: str) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise CorewardError(f"{source} {key}: {part!r} is not an index of a list of {len(node)}")
    return int(part)


def _child(node: Any, part: str, create: bool, key: str, source: str) -> Any:
    if isinstance(node, list):
        return node[_index(node, part, key, source)]
    if not isinstance(node, dict):
        raise CorewardError(f"{source} {key}: cannot descend into a {type(node).__name__}")
    if part not in node or node[part] is None:
        if not create:
            raise CorewardError(f"{source} {key}: no such key")
        node[part] = {}
    return node[part]


def build(cls: type[T], data: Any, key: str = "", where: str = "config") -> T:
    """Build dataclass `cls` from a mapping, checking keys and types recursively."""
    if not isinstance(data, dict):
        raise CorewardError(f"{where}: {key or 'top level'} must be a mapping, got {_describe(data)}")
    migrate = getattr(cls, "migrate_keys", None)
    if callable(migrate):  # a config of an older version: its moved keys where they are now
        data = migrate(data)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        from coreward.runtime.names import did_you_mean

        full = ", ".join(_join(key, u) for u in unknown)
        hint = did_you_mean(unknown, fields, _join(key, ""))
        raise CorewardError(f"{where}: unknown key {full}{hint} (known keys: {', '.join(sorted(fields))})")
    kwargs = {}
    for name, value in data.items():
        if value is None and not admits_none(hints[name]):
            continue  # null unsets it: the default (undoes what a `base:` file set)
        kwargs[name] = _convert(hints[name], value, _join(key, name), where)
    missing = [
        _join(key, f.name)
        for f in fields.values()
        if f.name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise CorewardError(f"{where}: missing required key {', '.join(missing)}")
    obj = cls(**kwargs)
    validate = getattr(obj, "validate", None)
    if callable(validate):
        try:
            validate()
        except CorewardError as err:
            raise CorewardError(f"{where}: {err}") from None
    return obj


def read_yaml_with_base(path: str | Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Read a config; a top-level `base: other.yaml` (relative to this file) is loaded first and merged under it.

    Lists (such as `rewards`) are replaced, not merged: a method's config names its own reward sources.
    """
    path = Path(path).resolve()
    if path in seen:
        raise CorewardError(f"config file {path}: 'base' chain loops back to itself")
    data = read_yaml(path)
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise CorewardError(f"config file {path}: key base must be a file name, got {base!r}")
    return _deep_merge(read_yaml_with_base(path.parent / base, seen + (path,)), data)


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_config(cls: type[T], path: str | Path | None, overrides: list[str] | None = None) -> T:
    """Load `cls` from a YAML file (or defaults when `path` is None) plus `--set` overrides."""
    data = read_yaml_with_base(path) if path is not None else {}
    apply_overrides(data, overrides)
    return build(cls, data, where=f"config {path}" if path else "config")


def to_dict(obj: Any) -> Any:
    """A dataclass config as plain YAML-ready data (for the run directory's resolved config)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    return obj


def save_yaml(obj: Any, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(obj), sort_keys=False))


def check_type(expected: Any, value: Any, key: str, where: str) -> Any:
    """Public form of the scalar type check, for configs passed through to other libraries."""
    return _convert(expected, value, key, where)


def _convert(expected: Any, value: Any, key: str, where: str) -> Any:
    origin = typing.get_origin(expected)
    args = typing.get_args(expected)
    if expected is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _convert(option, value, key, where)
            except CorewardError as err:
                errors.append(err)
        raise errors[0] if len(errors) == 1 else CorewardError(
            f"{where}: key {key} has the wrong type: expected {_name(expected)}, got {_describe(value)}"
        )
    if origin is typing.Literal:
        if value not in args:
            raise CorewardError(f"{where}: key {key} must be one of {list(args)}, got {value!r}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise CorewardError(f"{where}: key {key} must be a list, got {_describe(value)}")
        item_type = args[0] if args else Any
        return [_convert(item_type, v, f"{key}.{i}", where) for i, v in enumerate(value)]
    if origin is dict or expected is dict:
        if not isinstance(value, dict):
            raise CorewardError(f"{where}: key {key} must be a mapping, got {_describe(value)}")
        if len(args) == 2 and not admits_none(args[1]):  # null removes an entry (an inherited column mapping)
            return {k: v for k, v in value.items() if v is not None}
        return dict(value)
    if dataclasses.is_dataclass(expected):
        return build(expected, value, key, where)
    if expected is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if isinstance(value, str):  # YAML reads 1e-6 (no dot) as a string
                try:
                    return float(value)
                except ValueError:
                    pass
            raise CorewardError(f"{where}: key {key} must be a number, got {_describe(value)}")
        return float(value)
    if expected is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise CorewardError(f"{where}: key {key} must be an integer, got {_describe(value)}")
        return value
    if expected is bool:
        if not isinstance(value, bool):
            raise CorewardError(f"{where}: key {key} must be true or false, got {_describe(value)}")
        return value
    if expected is str:
        if not isinstance(value, str):
            raise CorewardError(f"{where}: key {key} must be a string, got {_describe(value)}")
        return value
    return value


def admits_none(tp: Any) -> bool:
    """Whether null is a value of type `tp` (Any, or an Optional); elsewhere null means "unset"."""
    return tp is Any or (typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp))


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def check_args_keys(args_class: type, settings: dict[str, Any], section: str, managed: dict[str, str],
                    aliases: tuple[str, ...] = ()) -> None:
    """Check a config section passed to a Hugging Face arguments dataclass (`training:` -> TrainingArguments,
    `grpo:` -> GRPOConfig): every key is one of its fields (or an alias), none is one coreward sets itself
    (`managed`: key -> where to set it instead), and scalar values get their field's type (in place)."""
    fields = {f.name for f in dataclasses.fields(args_class) if f.init}
    hints = typing.get_type_hints(args_class)
    for key, value in settings.items():
        if key not in fields and key not in aliases:
            from coreward.runtime.names import did_you_mean

            raise CorewardError(f"key {section}.{key}: not a {args_class.__module__.split('.')[0]}.{args_class.__name__} "
                                f"option{did_you_mean(key, fields | set(aliases))}")
        if key in managed:
            raise CorewardError(f"key {section}.{key}: set it with {managed[key]} instead")
        expected = hints.get(key)
        options = [a for a in typing.get_args(expected) if a is not type(None)] or [expected]
        if value is not None and all(o in (int, float, bool, str) for o in options):
            settings[key] = check_type(expected, value, f"{section}.{key}", "config")
