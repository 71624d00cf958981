"""Rebuild the recording from the table of published figures.

The official run's `json_cache.json` cannot be had, so this script makes one with the same calls
under the same cache keys. It runs the notebooks' own code (the probe experiment, then the
reconciliation: the official run's order) against a stand-in transport that answers each call from
`data/published_figures.csv`. Every value the official page prints is taken from that table as it
is; every value it does not print is filled by one of the RULES below, and
`json_cache/provenance.json` records, field by field, which is which and where on the
page each published value stands.

    python -m tools.build_recording          # write json_cache/: both files
    python -m tools.build_recording --check  # exit 1 if the committed files differ from a rebuild
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import io
import json
import statistics
import sys
import tempfile
from pathlib import Path

import httpx2

from memorybook.config import (
    PROVENANCE_PATH,
    RECORDED_ON,
    RECORDING_PATH,
    REPO_ROOT,
    TYPESAFE_MODEL,
)
from memorybook.example import ROUTE
from memorybook.jev import Jev
from memorybook.memory import MEMORY_KEY
from memorybook.recording import RecordingError, cache_key
from memorybook.replay import RECORD_COMMAND, mark_as_the_collection
from tools.record.every_call import make_every_call
from tools.record.missing import describe_missing, missing_calls

FIGURES_PATH = REPO_ROOT / "data" / "published_figures.csv"
OFFICIAL_KEYS_PATH = REPO_ROOT / "data" / "official_keys.txt"

# Totals the official run's recording holds (31 distinct calls), as a tutorial of the page reports.
PUBLISHED_TOTALS = {"calls": 31, "route_calls": 19, "gate_calls": 12,
                    "input_tokens": 21_456, "output_tokens": 1_752}
TOTALS_SOURCE = "a published tutorial of the official page, which reports the official run's totals"
MODEL_SOURCE = "official page, setup: the numbers came from jev-1.14.0 on 2026-10-29"
TYPE_SOURCE = "fixed by the question: a Choice question gets a choice answer, a Noul a noul answer"

RULES = {
    "chosen-probability": "A routing answer whose probability the page does not print gets the "
    "lower median of the routing probabilities it does print.",
    "remainder-shared": "The options Jev did not choose share what is left of 1.00 equally, in "
    "hundredths; leftover hundredths go to the first options in the question's order.",
    "choice-confidence": "Confidence is the documented Choice formula (n * p - 1) / (n - 1) for n "
    "options, from the chosen option's rounded probability, rounded to 0.01.",
    "gate-not-saved": "A gate call the page reports only as 'not saved' gets the lowest gate "
    "probability the page prints for a ticket that was not saved.",
    "tokens-by-size": "The token totals a published tutorial of the page reports are shared out "
    "in proportion to the size of each request body (input) and of each answer (output), by "
    "largest remainder.",
}


class UnpublishedCallError(RuntimeError):
    """The notebooks' code made a call the table of published figures does not describe."""


def official_keys() -> set[str]:
    """The cache keys of the requests the official page makes (data/official_keys.txt)."""
    lines = OFFICIAL_KEYS_PATH.read_text(encoding="utf-8").splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def read_figures() -> dict[tuple, dict]:
    """The published figures, by call: (question, ticket, memories or routed-to team)."""
    figures = {}
    with FIGURES_PATH.open(encoding="utf-8", newline="") as table:
        for row in csv.DictReader(table):
            context = row["memories"] if row["question"] == "team" else row["routed_to"]
            figures[(row["question"], row["ticket"], context)] = row
    return figures


def identify(body: dict, route_criteria: dict, memory_key: str) -> tuple:
    """Which call of the table a request body is: its question, ticket and context."""
    state, question = body["state"], next(iter(body["questions"]))
    if question == "remember":
        routed_to = next(iter(state["jev_answered"].values()))
        team = next(team for team, text in route_criteria.items() if text == routed_to)
        return question, state["request"]["ticket"]["id"], team
    memories = " ".join(m["request"]["ticket"]["id"] for m in state.get(memory_key, []))
    return question, state["ticket"]["id"], memories


def hundredths(value: float) -> int:
    return round(value * 100)


def fill_choice(options: list[str], row: dict, default_probability: str) -> tuple[dict, dict]:
    """A Choice answer from its table row, and which of its fields are published or filled."""
    where = row["where"]
    published = {"answers.team.choice": where}
    chosen = row["answer"]
    if row["probability"]:
        chosen_share = hundredths(float(row["probability"]))
        published[f"answers.team.probabilities.{chosen}"] = where
        filled = {}
    else:
        chosen_share = hundredths(float(default_probability))
        filled = {f"answers.team.probabilities.{chosen}": "chosen-probability"}
    others = [option for option in options if option != chosen]
    base, leftover = divmod(100 - chosen_share, len(others))
    shares = {option: base + (1 if i < leftover else 0) for i, option in enumerate(others)}
    shares[chosen] = chosen_share
    probabilities = {option: shares[option] / 100 for option in options}
    n, p = len(options), chosen_share / 100
    answer = {
        "type": "choice",
        "choice": chosen,
        "confidence": round((n * p - 1) / (n - 1), 2),
        "probabilities": probabilities,
    }
    filled.update({f"answers.team.probabilities.{option}": "remainder-shared" for option in others})
    filled["answers.team.confidence"] = "choice-confidence"
    return answer, {"published": published, "filled": filled}


def fill_gate(row: dict, not_saved_probability: str) -> tuple[dict, dict]:
    """A Noul gate answer from its table row, and which of its fields are published or filled."""
    if row["probability"]:
        return (
            {"type": "noul", "noul": float(row["probability"])},
            {"published": {"answers.remember.noul": row["where"]}, "filled": {}},
        )
    return (
        {"type": "noul", "noul": float(not_saved_probability)},
        {"published": {"verdict (P below REMEMBER_AT)": row["where"]},
         "filled": {"answers.remember.noul": "gate-not-saved"}},
    )


def largest_remainder(total: int, weights: dict[str, int]) -> dict[str, int]:
    """Whole numbers in proportion to `weights` that add up to exactly `total`."""
    weight_sum = sum(weights.values())
    exact = {key: total * weight / weight_sum for key, weight in weights.items()}
    shares = {key: int(value) for key, value in exact.items()}
    by_remainder = sorted(exact, key=lambda key: (shares[key] - exact[key], key))
    for key in by_remainder[: total - sum(shares.values())]:
        shares[key] += 1
    return shares


def rebuild() -> tuple[str, str]:
    """Run the notebooks' code against the table; return the recording and provenance texts."""
    figures = read_figures()
    routes = [row for row in figures.values() if row["question"] == "team"]
    default_route = str(statistics.median_low(
        float(row["probability"]) for row in routes if row["probability"]))
    default_gate = str(min(
        float(row["probability"]) for row in figures.values()
        if row["question"] == "remember" and row["answer"] == "not saved" and row["probability"]))

    calls: dict[str, dict] = {}  # cache key -> what was asked and answered
    official = official_keys()

    def answer(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        identity = identify(body, ROUTE["team"].criteria, MEMORY_KEY)
        row = figures.get(identity)
        if row is None:
            raise UnpublishedCallError(f"no published figures for the call {identity}")
        key = cache_key(body["model"], json.dumps(body["state"]), json.dumps(body["questions"]))
        if key not in official:
            raise UnpublishedCallError(
                f"the call {describe(*identity)} asks something other than the official page "
                f"does: its request (model, state or questions) differs from the one the "
                f"published figures belong to (its key {key[:12]}... is not in "
                f"{OFFICIAL_KEYS_PATH.relative_to(REPO_ROOT)}). Nothing was written; restore "
                f"the official wording, or record the calls live (`{RECORD_COMMAND}`).")
        question_id, question = next(iter(body["questions"].items()))
        if question_id == "team":
            answer, fields = fill_choice(list(question["criteria"]), row, default_route)
        else:
            answer, fields = fill_gate(row, default_gate)
        calls[key] = {"identity": identity, "request_size": len(request.content),
                      "request": {"model": body["model"], "state": body["state"],
                                  "questions": body["questions"]},
                      "answer_size": len(json.dumps(answer)), "fields": fields}
        response = {"model": TYPESAFE_MODEL, "usage": {"input_tokens": 0, "output_tokens": 0},
                    "answers": {question_id: answer}}
        return httpx2.Response(200, json=response)

    with tempfile.TemporaryDirectory() as scratch:
        scratch_recording = Path(scratch) / "json_cache.json"
        from typesafe_sdk import TypeSafeClient

        client = TypeSafeClient(
            api_key="rebuild", transport=httpx2.MockTransport(answer), compression=False
        )
        jev = Jev(scratch_recording, mode="record", client=client)
        with contextlib.redirect_stdout(io.StringIO()):
            make_every_call(ask=jev.ask)
        entries = json.loads(scratch_recording.read_text(encoding="utf-8"))

    check_totals(calls, entries, figures)
    input_tokens = largest_remainder(
        PUBLISHED_TOTALS["input_tokens"], {k: c["request_size"] for k, c in calls.items()})
    output_tokens = largest_remainder(
        PUBLISHED_TOTALS["output_tokens"], {k: c["answer_size"] for k, c in calls.items()})
    provenance_entries = {}
    for key in sorted(entries):
        entries[key]["usage"] = {"input_tokens": input_tokens[key],
                                 "output_tokens": output_tokens[key]}
        question, ticket, context = calls[key]["identity"]
        fields = calls[key]["fields"]
        fields["published"]["model"] = MODEL_SOURCE
        fields["published"][f"answers.{question}.type"] = TYPE_SOURCE
        fields["filled"]["usage.input_tokens"] = "tokens-by-size"
        fields["filled"]["usage.output_tokens"] = "tokens-by-size"
        context_column = "memories" if question == "team" else "routed_to"
        provenance_entries[key] = {
            "call": describe(question, ticket, context),
            "table_row": {"question": question, "ticket": ticket, context_column: context},
            **fields,
            "request": calls[key]["request"],
        }

    recording = json.dumps({key: entries[key] for key in sorted(entries)}, indent=2)
    provenance = {
        "origin": "rebuilt",
        "recording_sha256": hashlib.sha256(recording.encode()).hexdigest(),
        "about": "What in json_cache/json_cache.json is published and what is filled "
        "in, and "
        "the request behind each answer; written by `python -m tools.build_recording`, never by "
        "hand.",
        "model": TYPESAFE_MODEL,
        "recorded_on": RECORDED_ON,
        "published_totals": {**PUBLISHED_TOTALS, "source": TOTALS_SOURCE},
        "rules": RULES,
        "entries": provenance_entries,
    }
    return recording, json.dumps(provenance, indent=2, ensure_ascii=False) + "\n"


def describe(question: str, ticket: str, context: str) -> str:
    if question == "team":
        return f"route {ticket} with memories: {context or 'none'}"
    return f"gate {ticket} routed to {context}"


def check_totals(calls: dict, entries: dict, figures: dict) -> None:
    """The rebuilt run must be the official run: every table row used, the published counts met."""
    unused = set(figures) - {call["identity"] for call in calls.values()}
    routes = sum(call["identity"][0] == "team" for call in calls.values())
    problems = []
    if set(calls) != set(entries):
        problems.append("the cache keys cooksafe wrote differ from the keys computed here")
    if unused:
        problems.append(f"table rows no call used: {sorted(unused)}")
    if (len(calls), routes) != (PUBLISHED_TOTALS["calls"], PUBLISHED_TOTALS["route_calls"]):
        problems.append(f"{len(calls)} calls ({routes} routing), not the published 31 (19)")
    if problems:
        raise SystemExit("The rebuild does not match the official run: " + "; ".join(problems))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed files")
    args = parser.parse_args(argv)
    mark_as_the_collection()
    try:
        recording, provenance = rebuild()
    except UnpublishedCallError as error:
        print(f"Not rebuilt: {error}", file=sys.stderr)
        try:
            listed = describe_missing(missing_calls(RECORDING_PATH).missing, RECORDING_PATH)
        except RecordingError as unreadable:
            listed = [str(unreadable)]
        print("\n".join(listed), file=sys.stderr)
        return 1
    outputs = {RECORDING_PATH: recording, PROVENANCE_PATH: provenance}
    if args.check:
        stale = [path for path, text in outputs.items()
                 if not path.exists() or path.read_text(encoding="utf-8") != text]
        for path in stale:
            print(f"{path.relative_to(REPO_ROOT)} differs from a rebuild from "
                  f"{FIGURES_PATH.relative_to(REPO_ROOT)}: run `make recording`", file=sys.stderr)
        return 1 if stale else 0
    for path, text in outputs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
