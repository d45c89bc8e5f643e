"""Start (or resume) a league: ``python -m actors.launch [--config FILE] [key=value ...]``.

With no arguments it runs configs/kuhn_poker.yaml on a local Ray with storage
under runs/. Inside ``ray job submit`` (RAY_ADDRESS set) it joins that cluster.
Pointing ``run.storage`` at an existing run resumes it. A bad config value
stops it before Ray starts, with one line that names the key; so does a game
brought by module path that breaks the protocol of envs/base.py
(``envs.protocol.check_game``), and a store in ``run.storage`` that holds
another game's league. Such a module imports from the current
directory or the config file's folder, in the launcher and in every worker of
a local Ray (``actors.preflight.import_paths``). Ctrl-C, or the
budget (``run.max_minutes``, ``run.max_env_steps``), stops it cleanly with
everything flushed to the store.

The same from Python (a notebook, a script): ``LeagueRun.start``
(``actors/league_run.py``, also ``from nash_league import LeagueRun``), whose
``stop`` flushes the store as Ctrl-C does; docs/user-guide.md shows it.
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from pathlib import Path

from actors.preflight import (DEFAULT_CONFIG, StorageInUse, cache_warning, check_storage_free, check_store, load_checked,
                              resume_warning)
from actors.progress import progress_line
from league.config import ConfigError
from league.errors import ArgumentParser, fail

CONFIG_SUFFIXES = (".yaml", ".yml")


def parse_args(argv: list[str] | None):
    parser = ArgumentParser(prog="python -m actors.launch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=None, help=f"YAML config (default {DEFAULT_CONFIG.name})")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. run.max_minutes=10")
    return parser.parse_args(argv)


def config_file_argument(overrides: list[str]) -> str | None:
    """An argument given where ``key=value`` overrides go that names a config file (a YAML file's
    name, or a file that exists): the user meant ``--config`` it."""
    for text in overrides:
        if "=" not in text and (text.endswith(CONFIG_SUFFIXES) or Path(text).is_file()):
            return text
    return None


def load(argv: list[str] | None):
    """Config and game shape of the launcher's command line, all checked before Ray starts."""
    args = parse_args(argv)
    return load_checked(args.config, args.overrides)


def storage_in_use(exc: StorageInUse) -> int:
    """The one line for a storage another launcher holds."""
    return fail(f"storage {exc.storage}", f"in use by another launcher (pid {exc.holder}); stop it first or "
                                          "choose another run.storage", status=3)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args = parse_args(argv)
    mistaken = config_file_argument(args.overrides)
    if mistaken:
        return fail(mistaken, f"did you mean --config {mistaken}?")
    try:
        cfg, info = load_checked(args.config, args.overrides, first=check_storage_free)
        check_store(cfg)
    except ConfigError as exc:
        return fail("config", exc)
    except StorageInUse as exc:
        return storage_in_use(exc)
    for warning in (cache_warning(cfg, info), resume_warning(cfg)):
        if warning:
            print(f"nash-league: warning: {warning}", file=sys.stderr, flush=True)
    # After the checks, so that a bad config is one line without importing Ray (and the actors).
    from actors.league_run import LeagueRun
    from actors.runtime import RaySession
    from serve.api import ApiUnavailable

    try:
        session = RaySession(cfg, args.config)
    except StorageInUse as exc:  # taken since the check above
        return storage_in_use(exc)
    except ConfigError as exc:
        return fail("config", exc)
    stop = {"flag": False}

    def on_signal(signum, frame):
        stop["flag"] = True

    # after Ray started: ray.init installs its own SIGTERM handler
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        run = LeagueRun(cfg, info, session)
    except ApiUnavailable as exc:
        session.close()
        return fail("serve", exc)
    try:
        run.keep_running(lambda: stop["flag"],
                         lambda status, rate, elapsed: print(progress_line(status, rate, elapsed), flush=True))
        print("nash-league: stopping (flushing results and checkpoints)...", flush=True)
        final = run.stop()
        print(progress_line(final, 0.0, time.time() - run.started_at), flush=True)
        print(f"nash-league: stopped; the league is in {Path(cfg.run.storage) / 'league.db'}", flush=True)
    finally:
        session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
