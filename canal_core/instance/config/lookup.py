"""Looking values up: the precedence layers (-D overrides, environment, instance.properties,
canal.properties, Canal's default), ``${...}`` placeholders, the typed value of a key, and the warnings
a file's keys deserve."""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .keys import KEYS_BY_NAME, BadValue, Key
from .properties import Prop, PropertiesFile

# --- ${...} placeholders ---------------------------------------------------------------------------------


def _brace_end(text: str, start: int) -> int:
    """Index of the "}" closing the placeholder whose name starts at ``start``; -1 when unterminated."""
    depth = 0
    for k in range(start, len(text)):
        c = text[k]
        if c == "{":
            depth += 1
        elif c == "}":
            if depth == 0:
                return k
            depth -= 1
    return -1


def _split_default(inner: str) -> tuple[str, str | None]:
    """``name:default`` at the first top-level colon (a colon inside a nested ${...} does not count)."""
    depth = 0
    for k, c in enumerate(inner):
        if c == "{":
            depth += 1
        elif c == "}":
            depth = max(0, depth - 1)
        elif c == ":" and depth == 0:
            return inner[:k], inner[k + 1:]
    return inner, None


class Resolver:
    """Looks keys up through the layers (highest precedence first) and expands placeholders."""

    def __init__(self, layers: Sequence[Mapping[str, Prop]], builtins: Mapping[str, str],
                 defaults: Mapping[str, str]) -> None:
        self.layers = layers
        self.builtins = builtins
        self.defaults = defaults
        self._cache: dict[str, Prop] = {}

    def raw(self, key: str) -> Prop | None:
        if key in self.builtins:
            return Prop(self.builtins[key], "built-in")
        for layer in self.layers:
            p = layer.get(key)
            if p is not None:
                return p
        return None

    def get(self, key: str) -> Prop | None:
        """The value set for ``key`` (expanded), or None when it is set nowhere."""
        return self._resolve(key, ())

    def expand_default(self, key: str) -> Prop:
        text = self.defaults[key]
        origin = Prop(text, "default")
        return Prop(self._expand(text, origin, key, (key,)), "default", raw=text)

    def _resolve(self, key: str, stack: tuple[str, ...]) -> Prop | None:
        if key in self._cache:
            return self._cache[key]
        p = self.raw(key)
        if p is None:
            return None
        if "${" in p.value:
            p = Prop(self._expand(p.value, p, key, (*stack, key)), p.source, p.line, raw=p.value)
        self._cache[key] = p
        return p

    def _expand(self, text: str, origin: Prop, key: str, stack: tuple[str, ...]) -> str:
        out: list[str] = []
        i = 0
        while True:
            j = text.find("${", i)
            if j < 0:
                out.append(text[i:])
                return "".join(out)
            out.append(text[i:j])
            end = _brace_end(text, j + 2)
            if end < 0:  # unterminated: left as written, as Spring does
                out.append(text[j:])
                return "".join(out)
            name_text, default = _split_default(text[j + 2:end])
            name = self._expand(name_text, origin, key, stack).strip()
            if name in stack:
                chain = " -> ".join((*stack[stack.index(name):], name))
                raise ConfigError(f"{origin.where}: {key}: placeholder cycle {chain}", file=origin.source,
                                  line=origin.line, key=key, value=origin.value)
            found = self._resolve(name, stack)
            if found is not None:
                out.append(found.value)
            elif default is not None:
                out.append(self._expand(default, origin, key, stack))
            elif name in self.defaults:
                out.append(self._expand(self.defaults[name], origin, key, (*stack, name)))
            else:
                raise ConfigError(
                    f"{origin.where}: {key}: unknown placeholder ${{{name}}}: define {name} in canal.properties "
                    f"or instance.properties, pass it as an override (-D), or write ${{{name}:default}}",
                    file=origin.source, line=origin.line, key=key, value=origin.value)
            i = end + 1


def unknown_warning(prop: Prop, key: str) -> str:
    close = difflib.get_close_matches(key, list(KEYS_BY_NAME), n=1, cutoff=0.8)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"{prop.where}: unknown key {key} (kept, not used){hint}"


def value_of(resolver: Resolver, key: Key, name: str | None = None) -> Any:
    """The typed value of ``key`` (looked up as ``name`` when given); Canal's default when unset."""
    lookup = name or key.name
    prop = resolver.get(lookup)
    if prop is not None and not prop.value.strip() and not key.blank_is_value:
        prop = None  # blank number / boolean / enum: the default
    if prop is None:
        if name is not None or key.default is None:
            return None
        prop = resolver.expand_default(key.name)
    text = prop.value.strip()
    try:
        return key.parse(text)
    except BadValue as e:
        secret = lookup.endswith(".auth")  # a credential is never echoed
        shown = "'***'" if secret else repr(text)
        if prop.raw is not None and prop.raw.strip() != text and not secret:
            shown += f" (from {prop.raw.strip()!r})"
        raise ConfigError(f"{prop.where}: {lookup} = {shown} is invalid: expected {e.expected}",
                          file=prop.source, line=prop.line, key=lookup, value="***" if secret else text) from None


def override_layers(overrides: Mapping[str, str] | None, env: Mapping[str, str] | None) -> list[dict[str, Prop]]:
    env_map = os.environ if env is None else env
    return [{k: Prop(str(v), "-D") for k, v in (overrides or {}).items()},
            {k: Prop(str(v), "environment") for k, v in env_map.items()}]


def resolve_dir(base: Path, value: str) -> Path:
    p = Path(value).expanduser()
    return Path(os.path.normpath(p if p.is_absolute() else base / p))


log = logging.getLogger(__name__)
_overrides_logged: set[tuple[str, str, str, str]] = set()


def log_overrides(layers: Sequence[Mapping[str, Prop]], pf: PropertiesFile) -> None:
    """Warn (once per process) about each key of ``pf`` that a -D or environment value overrides: the file's
    line is not what the process uses, and nothing else would say so."""
    for key, prop in pf.props.items():
        for layer in layers:
            over = layer.get(key)
            if over is None:
                continue
            seen = (prop.where, key, over.source, over.value)
            if seen not in _overrides_logged:
                _overrides_logged.add(seen)
                log.warning("%s: %r (%s) is used instead of %r (%s)", key, over.value, over.source, prop.value,
                            prop.where)
            break


def duplicate_warnings(pf: PropertiesFile) -> list[str]:
    return [f"{pf.path}:{later}: {key} is assigned again (line {first}); the later value wins"
            for key, first, later in pf.duplicates]

