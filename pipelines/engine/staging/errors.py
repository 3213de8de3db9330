"""What makes a window impossible to stage or to load."""

from __future__ import annotations


class StagingError(Exception):
    """An entry the window cannot be staged from."""


class RowImageError(StagingError):
    """A row image without all the table's columns (binlog_row_image MINIMAL or NOBLOB)."""


class IncompleteWindowError(StagingError):
    """A window directory without its manifest (staging did not finish)."""
