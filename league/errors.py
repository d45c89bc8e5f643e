"""The one form of a command-line error: ``nash-league: <what>: <why>`` on stderr, one line, a nonzero exit.

``what`` names what was refused (an option and its value, a file, a command), ``why`` says why.
``UsageError`` carries the two from where the refusal is found to the command's ``main``, which
prints it with ``fail``; ``ArgumentParser`` gives argparse's own refusals (a missing option, a bad
choice) the same one line.
"""

from __future__ import annotations

import argparse
import sys

PROGRAM = "nash-league"


class UsageError(ValueError):
    """A refusal a user can act on: ``what`` was refused because ``why``. A ValueError, so code that
    handles bad values handles it too."""

    def __init__(self, what: str, why: object):
        self.what, self.why = str(what), str(why)
        super().__init__(f"{self.what}: {self.why}")


def error_line(what: str, why: object) -> str:
    """``nash-league: <what>: <why>`` on one line (a multi-line ``why`` keeps its first line)."""
    text = str(why).strip()
    return f"{PROGRAM}: {what}: {text.splitlines()[0] if text else type(why).__name__}"


def fail(what: str | UsageError, why: object = None, status: int = 2) -> int:
    """Print the error line to stderr and return ``status`` (a command's exit status).
    ``fail(UsageError)`` prints its what and why."""
    if isinstance(what, UsageError):
        what, why = what.what, what.why
    print(error_line(str(what), why), file=sys.stderr, flush=True)
    return status


def command_name(prog: str) -> str:
    """A parser's prog as the command a user typed, short: ``python -m serve.export`` -> ``serve.export``,
    ``nash-league export`` -> ``export``."""
    for prefix in ("python -m ", f"{PROGRAM} "):
        if prog.startswith(prefix):
            return prog[len(prefix):]
    return prog


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose refusals are the one error line (exit status 2, as argparse's own), naming the
    command and pointing at ``--help``; ``--help`` itself is argparse's."""

    def error(self, message: str):
        self.exit(2, error_line(command_name(self.prog), f"{message} (see --help)") + "\n")
