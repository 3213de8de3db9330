"""Stage one window of Canal entries as files (the layout pipelines.engine.window describes), durably.

``stage_window`` parses the serialized Canal Entries, writes typed per-table parts, the changelog and the
manifest into a temporary directory, fsyncs them, and renames the directory into place: a window directory
either holds everything with manifest.json or does not exist (a directory without manifest is incomplete
and ``load_window`` refuses it). Staging the same window/attempt again replaces what is there.

Speed matters (a window is ~100k rows): the texts of an entry's rows come out of one protobuf parse that merges
all its columns (``rows._images``: no Python object per column), as UTF-8 bytes into one flat list for the window;
typed columns are converted per column with Arrow (pipelines.engine.types.convert_texts), never value by value
in Python except where Arrow cannot convert exactly.

Modules: errors, files (paths, manifest, durable writes), messages (the fast protobuf readers), rows (row images
to texts), stager (a window's accumulation and its files). This module is the API the sensor and the runs use.
"""

from __future__ import annotations

from .errors import IncompleteWindowError, RowImageError, StagingError
from .files import load_window, window_path
from .stager import stage_window

__all__ = [
    "IncompleteWindowError",
    "RowImageError",
    "StagingError",
    "load_window",
    "stage_window",
    "window_path",
]
