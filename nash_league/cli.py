"""The ``nash-league`` command: one entry point for the product's tools.

    nash-league run --config configs/connect_four.yaml     # python -m actors.launch ...
    nash-league report --storage runs/connect_four         # python -m monitoring.report ...
    nash-league export --storage RUN --out DIR             # python -m serve.export ...
    nash-league backup --storage RUN --out COPY            # python -m league.backup ...
    nash-league exploitability --storage RUN               # python -m evaluation.exploitability ...
    nash-league compare --game kuhn_poker                  # python -m evaluation.compare ...

Each subcommand hands the rest of its arguments to the same ``main(argv)`` as its ``python -m``
form, so the two behave alike; its module is imported only when it is chosen (they import torch or
Ray). ``nash-league`` alone or ``--help`` lists them.
"""

from __future__ import annotations

import importlib
import sys

from league.errors import fail

# subcommand -> (module whose main(argv) it runs, what it does)
COMMANDS = {
    "run": ("actors.launch", "start (or resume) a league from a config"),
    "report": ("monitoring.report", "write a self-contained HTML report of a run"),
    "export": ("serve.export", "write a run's published Nash mixture as ONNX (or TorchScript) files"),
    "backup": ("league.backup", "copy a run's store consistently, while it runs"),
    "exploitability": ("evaluation.exploitability", "exact NashConv of a run's mixture (Kuhn, Leduc)"),
    "compare": ("evaluation.compare", "league vs self-play from the same config at equal wall-clock time"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: nash-league COMMAND [ARGS...]   (nash-league COMMAND --help for its options)", "",
             "commands:"]
    lines += [f"  {name:<{width}}  {about}  (python -m {module})" for name, (module, about) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        return fail(name, f"unknown command; nash-league's commands are {', '.join(COMMANDS)} (nash-league --help)")
    return importlib.import_module(COMMANDS[name][0]).main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
