"""optuna-dashboard's ``save_note``, without importing the dashboard's web app.

``from optuna_dashboard import save_note`` runs the package's ``__init__``, which imports its
WSGI app and, through Optuna's importance module, scikit-learn: ~1.3 s of CPU in every
process that writes the study's note (each sweep, resume and confirm), for a function that
only writes two study attributes. So the dashboard's own ``_note`` module (it imports only
Optuna) is loaded by file, under a private name; should its layout ever change, the normal
import is used. The note's format stays the dashboard's, written by the dashboard's code.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

_NAME = "sweeper._optuna_dashboard_note"


def _plain() -> ModuleType:
    import optuna_dashboard._note as note

    return note


def _note_module() -> ModuleType:
    if _NAME in sys.modules:
        return sys.modules[_NAME]
    spec = importlib.util.find_spec("optuna_dashboard")  # finds, does not import
    where = list(spec.submodule_search_locations or []) if spec else []
    path = Path(where[0]) / "_note.py" if where else None
    if path is None or not path.is_file() or "optuna_dashboard" in sys.modules:
        return _plain()  # already loaded, or laid out otherwise
    file_spec = importlib.util.spec_from_file_location(_NAME, path)
    assert file_spec is not None and file_spec.loader is not None
    module = importlib.util.module_from_spec(file_spec)
    sys.modules[_NAME] = module
    try:
        file_spec.loader.exec_module(module)
    except Exception:  # noqa: BLE001 - any surprise in its layout: the plain import
        del sys.modules[_NAME]
        return _plain()
    return module


def save_note(study: Any, body: str) -> None:
    """Write ``body`` as the study's note, as optuna-dashboard shows it."""
    _note_module().save_note(study, body)
