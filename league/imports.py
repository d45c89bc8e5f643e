"""Where a league's own code imports from, so that the tools reading its store import it too.

A config may name a user's modules: the game (``game.name: "boxes.vector:DotsAndBoxes"``,
``"pettingzoo:boxes.aec:env"``), the network (``policy.net: "pkg.module:factory"``) and anchors
(``"pkg.module:factory"``). The launcher imports them from the current directory and the config's
folder (``actors.preflight.import_paths``); the coordinator records the folder each was imported
from in the store (meta ``import_paths``), and ``evaluation.stored_run`` appends those folders to
``sys.path``, so that ``python -m evaluation.exploitability --storage RUN`` loads the game from
anywhere.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Iterable

from league.anchors import parse_anchor

PETTINGZOO_PREFIXES = ("pettingzoo:", "pettingzoo-parallel:")


def config_modules(cfg) -> list[str]:
    """The dotted names of the modules ``cfg`` names by ``module:attr``, in order, once each."""
    specs = [cfg.game.name, cfg.policy.net]
    for text in cfg.anchors:
        try:
            anchor = parse_anchor(text)
        except ValueError:
            continue
        if anchor.kind == "factory":
            specs.append(anchor.factory)
    names = []
    for spec in specs:
        if not isinstance(spec, str):
            continue
        for prefix in PETTINGZOO_PREFIXES:
            if spec.startswith(prefix):
                spec = spec[len(prefix):]
        module, sep, _ = spec.rpartition(":")
        if sep and module and all(part.isidentifier() for part in module.split(".")):
            names.append(module)
    return list(dict.fromkeys(names))


def module_folder(name: str) -> str | None:
    """The folder on ``sys.path`` that module ``name`` imports from (absolute), or None where it
    cannot be found. Finding a dotted module imports its parent packages, not the module."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        return None
    path = Path(spec.origin).resolve()
    for _ in range(name.count(".") + 1 + (path.name == "__init__.py")):
        path = path.parent
    return str(path)


def import_folders(cfg) -> list[str]:
    """The folders the modules ``cfg`` names import from, as the coordinator records them."""
    folders = (module_folder(name) for name in config_modules(cfg))
    return list(dict.fromkeys(f for f in folders if f is not None))


def add_import_folders(folders: Iterable[object] | None) -> None:
    """Append each recorded folder that exists to ``sys.path`` (after what is there already, so the
    reader's own environment wins)."""
    for folder in folders or ():
        if isinstance(folder, str) and os.path.isdir(folder) and folder not in sys.path:
            sys.path.append(folder)
