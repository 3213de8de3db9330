"""The error every configuration problem is reported with."""

from __future__ import annotations


class ConfigError(ValueError):
    """An unusable configuration value. The message names the file (and line), the key, the value and
    what is expected; the parts are also attributes."""

    def __init__(self, message: str, *, file: str | None = None, line: int = 0, key: str | None = None,
                 value: str | None = None) -> None:
        super().__init__(message)
        self.file = file
        self.line = line
        self.key = key
        self.value = value

