"""The command line of `python -m tools.record`: what to run, checked before anything is sent."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import tools.record
from memorybook.config import RECORDING_PATH, REPO_ROOT, shown_path
from memorybook.replay import mark_as_the_collection
from tools.ctrl_c import how_stopped, stop_as_on_ctrl_c, stop_status
from tools.record.accept import accept, replay_check
from tools.record.dry_run import dry_run
from tools.record.run import has_a_recording_of_its_own, record

NEW_RECORDING = RECORDING_PATH.with_name("json_cache.new.json")
RECORDED_NOTEBOOKS = REPO_ROOT / "build" / "recorded"


def main(argv: list[str] | None = None) -> int:
    stop_as_on_ctrl_c()  # from here on, `stop` explains Ctrl-C, SIGTERM and SIGHUP
    mark_as_the_collection()  # a miss here is the collection's: `make record` records it
    parser = argparse.ArgumentParser(prog="python -m tools.record",
                                     description=tools.record.__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="list what would go live")
    parser.add_argument("--accept", action="store_true", help="replace the committed recording")
    parser.add_argument("--replay-check", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, default=NEW_RECORDING, help="the new recording")
    parser.add_argument("--notebooks-out", type=Path, default=RECORDED_NOTEBOOKS)
    parser.add_argument("--calls-only", action="store_true",
                        help="record the calls and report on them, without running the notebooks")
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="run only these notebooks on the new recording (default: all)")
    args = parser.parse_args(argv)
    if args.replay_check:
        return replay_check()
    output = args.output.resolve()
    if output == RECORDING_PATH:
        parser.error("recording over the committed file is what --accept is for")
    if args.accept:
        try:
            return accept(output)
        except KeyboardInterrupt as stopped:  # Ctrl-C, SIGTERM or SIGHUP
            print(f"Accept stopped: {how_stopped(stopped)}. {shown_path(RECORDING_PATH)} and its "
                  "provenance are both as they were, or both new if it stopped as it wrote them "
                  "(`git status` shows which); accept again to be sure.", file=sys.stderr)
            return stop_status(stopped)
    if args.dry_run:
        try:
            return dry_run(output)
        except KeyboardInterrupt as stopped:
            print(f"Dry run stopped: {how_stopped(stopped)}; it sends nothing and changes nothing.",
                  file=sys.stderr)
            return stop_status(stopped)
    if args.calls_only and args.notebooks:
        parser.error("--calls-only runs no notebook: name notebooks or --calls-only, not both")
    notebooks = [] if args.calls_only else [path.resolve() for path in args.notebooks] or None
    for path in notebooks or []:
        if not path.is_file() or path.suffix != ".ipynb":
            parser.error(f"no notebook at {shown_path(path)}")
        try:
            own = has_a_recording_of_its_own(path)
        except (OSError, ValueError) as error:
            parser.error(f"{shown_path(path)} is not a notebook that can be read: {error}")
        if own:
            parser.error(f"{path.name} records into a file of its own; `make record` skips it")
    return record(output, args.notebooks_out.resolve(), notebooks)
