"""The bad-input matrix's rows: one module per model directory (``<framework>_<model>.py``, each with
``ROWS``), gathered here in file-name order. A new model adds its own module."""

from __future__ import annotations

import importlib
import pkgutil

from bad_input_rows.row import Row

ROWS: list[Row] = [
    row
    for module in sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "row")
    for row in importlib.import_module(f"bad_input_rows.{module}").ROWS
]
