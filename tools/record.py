"""Record the collection live into a new recording, then compare it with the published figures.

    make record-dry-run   # which calls would go live, and what they would cost; needs no key
    make record           # with TYPESAFE_API_KEY (and TYPESAFE_ENDPOINT) set
    make accept-recording # after review: the new recording replaces the committed one

Recording never touches json_cache/json_cache.json: answers go to json_cache/json_cache.new.json
(resumed if a run was interrupted) and the notebooks run into build/recorded/. The two customers'
calls are independent of each other, so they are recorded side by side first; the notebooks then
replay the new recording. The API's own retry policy handles rate limits and server errors; a call
that still fails is explained, and nothing wrong is recorded.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import shutil
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import nbformat

from memorybook.config import (
    PROVENANCE_PATH,
    RECORDING_ENV,
    RECORDING_PATH,
    REPO_ROOT,
    TYPESAFE_MODEL,
    USAGE_LOG_ENV,
    USD_PER_BILLION_INPUT_TOKENS,
    replay_only_reason,
    shown_path,
)
from memorybook.live import describe_api_failure
from memorybook.recording import read_recording
from tools.build_recording import FIGURES_PATH
from tools.execute import execute, notebook_paths

NEW_RECORDING = RECORDING_PATH.with_name("json_cache.new.json")
# Notebooks whose live calls go to a recording of their own (8: json_cache/next_steps.json).
# A recording of the official calls does not run them: with a key they would ask new questions.
OWN_RECORDING = {"08_next_steps.ipynb"}
RECORDED_NOTEBOOKS = REPO_ROOT / "build" / "recorded"


def run_every_call(customers: list[str] | None = None) -> None:
    """Make every call the notebooks make, one thread per customer (their calls are independent).

    Imports the notebooks' modules, so RECORDING_ENV must name the target recording before.
    """
    from memorybook.probes import probe_experiment
    from memorybook.reconciliation import reconcile
    from memorybook.routing import CUSTOMERS

    def one_customer(customer: str) -> None:
        probe_experiment([customer])
        reconcile([customer])

    with contextlib.redirect_stdout(io.StringIO()), ThreadPoolExecutor(len(CUSTOMERS)) as pool:
        for finished in [pool.submit(one_customer, c) for c in customers or CUSTOMERS]:
            finished.result()


def record(output: Path, notebooks_out: Path) -> int:
    from typesafe_sdk import TypeSafeError

    reason = replay_only_reason()
    if reason is not None:
        print(f"Recording needs a live client, but {reason}. Nothing was sent.", file=sys.stderr)
        return 2
    os.environ[RECORDING_ENV] = str(output)
    already = len(read_recording(output))
    print(f"Recording into {shown_path(output)} ({already} calls already in it).")
    calls = Future()
    paths = [path for path in notebook_paths() if path.name not in OWN_RECORDING]
    with ThreadPoolExecutor(len(paths)) as pool:
        runs = [pool.submit(execute, path, calls) for path in paths]  # kernels start meanwhile
        try:
            run_every_call()
        except TypeSafeError as error:
            calls.set_exception(error)
            print(describe_api_failure(error), file=sys.stderr)
            print(f"{len(read_recording(output))} calls are recorded; run again to resume.",
                  file=sys.stderr)
            return 1
        calls.set_result(None)
        notebooks = [run.result() for run in runs]
    notebooks_out.mkdir(parents=True, exist_ok=True)
    for path, notebook in zip(paths, notebooks, strict=True):
        nbformat.write(notebook, notebooks_out / path.name)
    print(f"Notebooks run on it: {shown_path(notebooks_out)}/\n")
    print("\n".join(compare(read_recording(output))))
    return 0


def dry_run(output: Path) -> int:
    """Replay the calls from the committed recording and list the ones the new one lacks."""
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"memorybook-dry-run-{os.getpid()}.txt"
    log.unlink(missing_ok=True)
    os.environ.update({USAGE_LOG_ENV: str(log), RECORDING_ENV: str(RECORDING_PATH)})
    os.environ.pop("TYPESAFE_API_KEY", None)  # a dry run never calls the API
    run_every_call()
    keys = list(dict.fromkeys(log.read_text(encoding="utf-8").split()))
    log.unlink()
    have = read_recording(output)
    committed = read_recording(RECORDING_PATH)
    calls = provenance_calls()
    live = [key for key in keys if key not in have]
    tokens = sum(committed[key]["usage"]["input_tokens"] for key in live)
    print(f"A recording into {shown_path(output)} would send {len(live)} of the "
          f"collection's {len(keys)} calls to {TYPESAFE_MODEL}:")
    for key in live:
        print(f"  {calls.get(key, key)}  ~{committed[key]['usage']['input_tokens']:,} tokens")
    cost = tokens * USD_PER_BILLION_INPUT_TOKENS / 1e9
    print(f"Estimated input: {tokens:,} tokens, ${cost:.4f} at ${USD_PER_BILLION_INPUT_TOKENS} "
          f"per billion; output tokens are free.\n(Per-call counts come from the committed "
          f"recording, where only the total is published; see json_cache/provenance.json.)")
    return 0


def provenance_calls() -> dict[str, str]:
    provenance = json.loads(PROVENANCE_PATH.read_text(encoding="utf-8"))
    return {key: entry["call"] for key, entry in provenance["entries"].items()}


def answer_summary(entry: dict) -> str:
    answer = next(iter(entry["answers"].values()))
    if answer["type"] == "choice":
        return f"{answer['choice']} {answer['probabilities'][answer['choice']]:.2f}"
    verdict = "saved" if answer["noul"] >= 0.5 else "not saved"
    return f"{verdict} {answer['noul']:.2f}"


def published_figure(row: dict) -> tuple[str, str]:
    """How a table row reads, and a label for the call it describes."""
    if row["question"] == "team":
        situation = f"memories {row['memories']}" if row["memories"] else "plain"
        return f"{row['customer']} {row['subject']}, {situation}", \
            f"{row['answer']} {row['probability']}".strip()
    label = f"{row['customer']} {row['ticket']} gate, routed to {row['routed_to']}"
    return label, f"{row['answer']} {row['probability']}".strip()


def reproduces(published: str, now: str) -> bool:
    """Same choice or verdict, and the same probability where the page prints one."""
    *answer, probability = now.rsplit(" ", 1)
    return published in (now, " ".join(answer))


def compare(new: dict) -> list[str]:
    """Figure by figure against the published page, then call by call against the committed file."""
    committed = read_recording(RECORDING_PATH)
    provenance = json.loads(PROVENANCE_PATH.read_text(encoding="utf-8"))["entries"]
    key_of_row = {tuple(entry["table_row"].values()): key for key, entry in provenance.items()}
    lines, reproduced, figures = ["Published figures:"], 0, 0
    with FIGURES_PATH.open(encoding="utf-8", newline="") as table:
        for row in csv.DictReader(table):
            context = row["memories"] if row["question"] == "team" else row["routed_to"]
            entry = new.get(key_of_row.get((row["question"], row["ticket"], context)))
            label, published = published_figure(row)
            now = answer_summary(entry) if entry else "not asked (an earlier answer changed)"
            same = entry is not None and reproduces(published, now)
            figures += 1
            reproduced += same
            lines.append(f"  {label}: published {published}, now {now}"
                         + ("" if same else "   <- differs"))
    lines.append(f"{reproduced} of {figures} published figures reproduce.\n")
    calls = provenance_calls()
    changed = [key for key in new
               if key in committed and committed[key]["answers"] != new[key]["answers"]]
    lines.append(f"Calls whose answers changed: {len(changed)}")
    lines += [f"  {calls.get(key, key)}: was {answer_summary(committed[key])}, "
              f"now {answer_summary(new[key])}" for key in changed]
    only_new = [key for key in new if key not in committed]
    lines.append(f"Calls not in the committed recording (their state changed): {len(only_new)}")
    other_models = sorted({entry["model"] for entry in new.values()} - {TYPESAFE_MODEL})
    if other_models:
        lines.append(f"Answered by {', '.join(other_models)}, not the pinned {TYPESAFE_MODEL}: "
                     "the published figures may not apply.")
    return lines


def accept(new_path: Path, recording: Path = RECORDING_PATH,
           provenance_path: Path = PROVENANCE_PATH) -> int:
    """Make the new recording the committed one; every value in it is now measured."""
    new = read_recording(new_path)
    provenance = {
        "origin": "recorded",
        "about": "Recorded live by `python -m tools.record`; every value was measured.",
        "model": sorted({entry["model"] for entry in new.values()}),
        "entries": {key: {"call": key, "measured": "all fields"} for key in sorted(new)},
    }
    shutil.copyfile(new_path, recording)
    provenance_path.write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")
    print(f"{shown_path(recording)} now holds the {len(new)} recorded calls. Run "
          "`make run` to refresh the notebooks' outputs, then review `git diff` before committing.")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="list what would go live")
    parser.add_argument("--accept", action="store_true", help="replace the committed recording")
    parser.add_argument("--output", type=Path, default=NEW_RECORDING, help="the new recording")
    parser.add_argument("--notebooks-out", type=Path, default=RECORDED_NOTEBOOKS)
    args = parser.parse_args(argv)
    output = args.output.resolve()
    if output == RECORDING_PATH:
        parser.error("recording over the committed file is what --accept is for")
    if args.accept:
        return accept(output)
    if args.dry_run:
        return dry_run(output)
    return record(output, args.notebooks_out.resolve())


if __name__ == "__main__":
    sys.exit(main())
