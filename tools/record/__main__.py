"""`python -m tools.record`: the command tools/record/__init__.py describes."""

# ruff: noqa: E402 - the Ctrl-C handler below is installed before the slow imports

from tools.ctrl_c import one_line_while_starting

one_line_while_starting("Recording stopped: interrupted (Ctrl-C) while starting; nothing was sent.")

import os
import sys

from tools.record.cli import main
from tools.record.run import was_stopped

code = main()
if was_stopped():
    # Abandoned calls and nbclient's exit handlers would otherwise hold the process for
    # seconds; everything worth keeping is already on disk (stop_writing saw to that).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
sys.exit(code)
