"""What the recording holds and where each value came from: published, filled by a rule, measured.

These join the recording with json_cache/provenance.json for the notebooks: the
summary of the recording and every answer to one Noul question.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import NamedTuple

from memorybook.config import (
    USD_PER_BILLION_INPUT_TOKENS,
    input_cost_usd,
    recording_path,
    replay_only_reason,
    shown_path,
)
from memorybook.recording.file import read_recording
from memorybook.recording.provenance import origin_of, read_provenance
from memorybook.recording.state_parts import ticket_of


def recording_summary(path: Path | None = None) -> str:
    """Where the answers come from: the whole recording, its model and origin, and its cost."""
    path = recording_path() if path is None else path
    entries = read_recording(path)
    models = ", ".join(sorted({entry["model"] for entry in entries.values()})) or "no model yet"
    input_tokens = sum(entry["usage"].get("input_tokens") or 0 for entry in entries.values())
    provenance = read_provenance()
    text = path.read_bytes() if path.exists() else b""
    rebuilt_as_committed = provenance["origin"] == "rebuilt" and (
        hashlib.sha256(text).hexdigest() == provenance["recording_sha256"])
    if set(provenance["entries"]) != set(entries):
        origin = "not the calls json_cache/provenance.json describes"
    elif provenance["origin"] == "rebuilt" and not rebuilt_as_committed:
        origin = "the same calls as the rebuilt recording, with other answers"
    elif rebuilt_as_committed:
        origin = (f"the published result of {provenance['recorded_on']}, "
                  f"rebuilt from the official page's figures")
    else:
        kept = sum(len(entry.get("filled", {})) for entry in provenance["entries"].values())
        origin = ("recorded live, every value measured" if not kept else
                  f"recorded live; {kept} values equal ones the rebuilt recording filled by a "
                  "rule, and are still counted as filled")
    doing = "Replaying" if replay_only_reason() else "Live: new calls are added to"
    tokens_source = ""
    if rebuilt_as_committed:
        tokens_source = (f"\nThe count of calls and the token total come from "
                         f"{provenance['published_totals']['source']}; each call's share of the "
                         f"total is filled in.")
    return (
        f"{doing} {shown_path(path)}, the whole collection's recording: {len(entries)} calls to "
        f"{models} ({origin}).\n"
        f"Recording all of them read {input_tokens:,} input tokens: "
        f"${input_cost_usd(input_tokens):.4f} at ${USD_PER_BILLION_INPUT_TOKENS} per billion "
        f"(output tokens are free).{tokens_source}"
    )


def leaf_values(value: object, prefix: str = "") -> list[tuple[str, object]]:
    """(dotted field, value) for every number and string of an answer, e.g. answers.team.choice."""
    if isinstance(value, dict):
        return [leaf for name, item in value.items()
                for leaf in leaf_values(item, f"{prefix}{name}.")]
    return [(prefix.rstrip("."), value)]


class RecordedAnswer(NamedTuple):
    ticket: str  # the ticket the call was about
    value: float  # the recorded P(yes)
    origin: str  # "published", "filled: <rule>", or "measured"


def recorded_noul_answers(question_id: str) -> list[RecordedAnswer]:
    """Every recorded answer to one Noul question, with the ticket it judged and its origin."""
    entries, provenance = read_recording(), read_provenance()["entries"]
    answers = []
    for key, entry in sorted(entries.items()):
        if question_id not in entry["answers"] or key not in provenance:
            continue
        ticket = ticket_of(provenance[key]["request"]["state"]).get("id", "?")
        origin = origin_of(provenance[key], f"answers.{question_id}.noul")
        answers.append(RecordedAnswer(ticket, entry["answers"][question_id]["noul"], origin))
    return answers
