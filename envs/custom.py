"""Games users bring by module path: ``game: {name: "pkg.module:factory", params: {...}}``.

The factory is any callable (a function or a ``VectorGame`` subclass) found as
attribute ``factory`` of the importable module ``pkg.module`` (top level or
dotted). The league calls it with keywords only::

    factory(num_envs=E, seed=S, **params) -> VectorGame

``num_envs`` is the number of environments the vector steps at once (>= 1);
``seed`` is an int, or None for fresh entropy; ``params`` are the config's
``game.params``. It returns a ``VectorGame`` (envs/base.py) with exactly
``num_envs`` environments. ``envs.protocol.check_game`` checks the rest before
a league starts. Exact evaluation (``supports_exact``) is for OpenSpiel and
matrix games, so a game brought this way must not declare it.

The module is imported the way Python imports anything: from ``sys.path``. The
launcher puts the current directory and the config file's folder on it, for
itself and for every Ray worker (``actors.launch``).
"""

from __future__ import annotations

import importlib
import re
from typing import Callable

from envs.base import VectorGame

_MODULE = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
_SPEC = re.compile(rf"^(?P<module>{_MODULE}):(?P<attr>[A-Za-z_][A-Za-z0-9_]*)$")


def is_custom_game(name: object) -> bool:
    """A ``module:factory`` name (``pettingzoo:...`` and ``pettingzoo-parallel:...`` names are
    PettingZoo's; see envs.pettingzoo, envs.teams)."""
    return (isinstance(name, str) and ":" in name and not name.startswith("pettingzoo:")
            and not name.startswith("pettingzoo-parallel:"))


def import_attribute(spec: str, what: str) -> Callable:
    """``module:attr`` -> that attribute; ValueError naming what is wrong otherwise."""
    m = _SPEC.match(spec)
    if m is None:
        raise ValueError(f"{what} {spec!r}: want 'module:{'factory' if what == 'game' else 'name'}' "
                         "(a dotted module path, a colon, a name), e.g. 'mygames.dots:make_game'")
    module_name, attr = m.group("module"), m.group("attr")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        itself = exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + "."))
        where = "" if itself else f" (it imports {exc.name!r}, which is missing)"
        raise ValueError(f"{what} {spec!r}: cannot import module {module_name!r}{where}; run from the folder "
                         "that holds it, or put that folder on PYTHONPATH") from None
    except Exception as exc:  # the user's module failed while importing
        raise ValueError(f"{what} {spec!r}: importing {module_name!r} raised {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    try:
        found = getattr(module, attr)
    except AttributeError:
        raise ValueError(f"{what} {spec!r}: module {module_name!r} has no {attr!r}") from None
    if not callable(found):
        raise ValueError(f"{what} {spec!r}: {module_name}.{attr} is not callable")
    return found


def make_custom_game(name: str, num_envs: int, seed: int | None = None, **params) -> VectorGame:
    """Call the factory ``name`` names (see the module docstring); ValueError on a bad path, bad
    parameters, or something that is not a vector of ``num_envs`` games."""
    factory = import_attribute(name, "game")
    try:
        game = factory(num_envs=int(num_envs), seed=seed, **params)
    except TypeError as exc:
        raise ValueError(f"game {name!r}: calling it as {name.split(':')[1]}(num_envs=..., seed=..., "
                         f"**{sorted(params)}) failed ({exc})") from None
    missing = [a for a in ("num_envs", "num_actions", "obs_size", "simultaneous", "reset", "movers", "observe",
                           "step") if not hasattr(game, a)]
    if missing:
        raise ValueError(f"game {name!r}: the factory returned {type(game).__name__}, not a VectorGame "
                         f"(envs/base.py): it lacks {', '.join(missing)}")
    if game.num_envs != int(num_envs):
        raise ValueError(f"game {name!r}: asked for num_envs={num_envs}, the game has num_envs={game.num_envs}")
    if getattr(game, "supports_exact", False):
        raise ValueError(f"game {name!r} declares supports_exact, which only OpenSpiel and matrix games "
                         "have (evaluation.exploitability); set it False")
    if not isinstance(getattr(game, "name", None), str) or not game.name:
        game.name = name
    return game
