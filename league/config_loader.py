"""How a config is declared, read and checked, for any schema of dataclasses (``league.config``'s).

- ``setting(default, low=..., high=..., choices=..., auto=..., doc=...)`` declares a field with its
  bounds and its one-line meaning in the field's metadata; ``auto=True`` lets it also take the
  string ``"auto"``, which a plan of the machine resolves (``league.sizing``);
- ``check(obj, key)`` is the one loop that checks every field of a dataclass and of the
  dataclasses inside it against that metadata, then runs the class's ``rules(key)`` (the
  cross-field rules a bound cannot say);
- ``read(cls, path, overrides)`` builds ``cls`` from defaults, a YAML file (or a mapping) and
  dotted ``key=value`` overrides, checking every key and type (``from_dict``).

Every error is a ``ConfigError`` whose message starts with the dotted key it is about.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import numbers
import os
import types
import typing
from typing import Any, Iterable, Mapping, Sequence

import yaml


AUTO = "auto"  # what a setting declared with auto=True may hold instead of a value


class ConfigError(ValueError):
    """A configuration key is unknown or its value invalid; ``key`` names it."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}" if key else message)
        self.key = key


def setting(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING, low: float | None = None,
            high: float | None = None, open_low: bool = False, choices: Sequence[str] | None = None,
            auto: bool = False, doc: str = "") -> Any:
    """A dataclass field with its default (or ``factory``), its bounds (``low``, ``high``; ``open_low``
    excludes ``low``), the values it may take (``choices``), whether it may hold ``"auto"`` instead
    (``auto``) and its meaning (``doc``). ``check`` reads them; a None value of an optional field and
    ``"auto"`` in a field that takes it are not checked."""
    meta = {"low": low, "high": high, "open_low": open_low, "choices": tuple(choices) if choices else None,
            "auto": auto, "doc": doc}
    return dataclasses.field(default=default, default_factory=factory, metadata=meta)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _optional(tp: Any) -> tuple[Any, bool]:
    """``tp`` without ``None``, and whether it allowed None."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        inner = [a for a in args if a is not type(None)]
        return (inner[0] if len(inner) == 1 else tp), type(None) in args
    return tp, False


def _wrong_type(tp: Any, value: Any) -> str | None:
    """Why ``value`` is not of scalar type ``tp`` (for dataclasses made directly, not read)."""
    if tp is bool and not isinstance(value, bool):
        return "must be true or false"
    if tp is int and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
        return "must be an integer"
    if tp is float and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
        return "must be a number"
    if tp is str and not isinstance(value, str):
        return "must be a string"
    return None


def _out_of_bounds(value: float, meta: Mapping[str, Any], whole: bool) -> str | None:
    """``must be ...`` when ``value`` lies outside the bounds of ``meta`` (or is not finite)."""
    low, high, open_low = meta["low"], meta["high"], meta["open_low"]
    if low is not None and high is not None:
        text = f"from {low} to {high}" if whole else f"in {'(' if open_low else '['}{low}, {high}]"
    elif low is not None:
        text = f"{'>' if open_low else '>='} {low}"
    else:
        text = f"<= {high}"
    inside = (math.isfinite(value) and (low is None or value > low or (value == low and not open_low))
              and (high is None or value <= high))
    return None if inside else f"must be {text}"


def check(obj: Any, key: str = "") -> Any:
    """Check every field of dataclass ``obj`` (and of the dataclasses in it, lists of them included)
    against its ``setting`` metadata, then ``obj.rules(key)`` where the class has cross-field rules.
    Raises ``ConfigError`` naming the dotted key; returns ``obj``."""
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        dotted, value = f"{key}.{f.name}" if key else f.name, getattr(obj, f.name)
        tp, optional = _optional(hints[f.name])
        meta = f.metadata
        if (value is None and optional) or (value == AUTO and meta.get("auto")):
            continue
        why = _wrong_type(tp, value)
        if why is None and meta.get("choices") and value not in meta["choices"]:
            why = f"must be one of {', '.join(meta['choices'])}"
            value = repr(value)
        elif why is None and (meta.get("low") is not None or meta.get("high") is not None):
            why = _out_of_bounds(value, meta, tp is int)
            why = why and why + (" (or null)" if optional else "")
        elif why is not None:
            value = repr(value)
        if why:
            raise ConfigError(dotted, f"{why}{' (or auto)' if meta.get('auto') else ''}, got {value}")
        if dataclasses.is_dataclass(value):
            check(value, dotted)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if dataclasses.is_dataclass(item):
                    check(item, f"{dotted}[{i}]")
    rules = getattr(obj, "rules", None)
    if rules is not None:
        rules(key)
    return obj


def doc(cls: type, name: str) -> str:
    """The one-line meaning of setting ``name`` of dataclass ``cls``."""
    return next(f.metadata.get("doc", "") for f in dataclasses.fields(cls) if f.name == name)


# -- building dataclasses from plain data, with types checked -----------------

def from_dict(cls: type, data: Any, prefix: str = "") -> Any:
    """Build dataclass ``cls`` from a mapping, checking every key and type. An unknown key is
    explained by ``cls.unknown_key(key)`` where the class has it (e.g. another role's key)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(prefix, f"must be a mapping, got {type(data).__name__}")
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if key not in fields:
            why = getattr(cls, "unknown_key", lambda _: "unknown key")(key)
            raise ConfigError(dotted, f"{why} (known: {', '.join(sorted(fields))})")
        if fields[key].metadata.get("auto"):
            kwargs[key] = value if value == AUTO else _coerce(hints[key], value, dotted, " (or auto)")
        else:
            kwargs[key] = _coerce(hints[key], value, dotted)
    return cls(**kwargs)


def _coerce(tp: Any, value: Any, key: str, alt: str = "") -> Any:
    """``value`` as type ``tp``, or a ``ConfigError`` naming ``key``; ``alt`` follows what a scalar
    must be in the message (" (or auto)")."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(inner[0], value, key, alt)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, key)
    if tp is Any:
        return value
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(key, f"must be a list, got {value!r}")
        (item,) = typing.get_args(tp) or (Any,)
        return [_coerce(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(key, f"must be a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(key, f"must be true or false{alt}, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and not value.is_integer()):
            raise ConfigError(key, f"must be an integer{alt}, got {value!r}")
        return int(value)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, f"must be a number{alt}, got {value!r}")
        if not math.isfinite(value):
            raise ConfigError(key, f"must be a finite number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(key, f"must be a string{alt}, got {value!r}")
        return value
    return value


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a", "b", "c"], value parsed as YAML)."""
    if "=" not in text:
        raise ConfigError(text, "an override must look like key=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(key, "an override needs a dotted key before '='")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(key, f"cannot parse value {raw!r}: {exc}") from None
    return key.split("."), value


def _merge(base: dict, path: list[str], value: Any) -> None:
    node = base
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[path[-1]] = value


def read(cls: type, path: str | os.PathLike | Mapping[str, Any] | None = None, overrides: Iterable[str] = (),
         renamed: Mapping[str, str] | None = None) -> Any:
    """``cls`` from its defaults, then the YAML file (or a mapping of what such a file holds), then
    ``key=value`` overrides; not yet checked (``check``). ``renamed``: dotted keys that were renamed,
    each with what to use instead."""
    data: dict[str, Any] = {}
    if isinstance(path, Mapping):
        data = copy.deepcopy(dict(path))
    elif path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                loaded = yaml.safe_load(f)
        except OSError as exc:
            raise ConfigError("--config", f"cannot read {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ConfigError("--config", f"{path} is not valid YAML: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError("--config", f"{path} must hold a mapping at top level")
        data = loaded or {}
    for text in overrides:
        keys, value = parse_override(text)
        _merge(data, keys, value)
    for old, new in (renamed or {}).items():
        *sections, name = old.split(".")
        node: Any = data
        for section in sections:
            node = node.get(section) if isinstance(node, dict) else None
        if isinstance(node, dict) and name in node:
            raise ConfigError(old, f"renamed: {new}")
    return from_dict(cls, data)
