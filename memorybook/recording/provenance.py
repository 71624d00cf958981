"""json_cache/provenance.json, read in this one place: the request behind each
recorded answer, the reader's name for each call, and which of an answer's values were published,
filled or measured.

`tools/build_recording.py` and `make accept-recording` write the file; everything else reads it
through these functions.
"""

from __future__ import annotations

import json
from pathlib import Path

from memorybook.config import provenance_path
from memorybook.recording.commit import finish_pending_commit


def read_provenance(path: Path | None = None) -> dict:
    """The whole of json_cache/provenance.json (beside the recording in use, see
    config.provenance_path()), or of the provenance file at `path`."""
    path = provenance_path() if path is None else path
    finish_pending_commit(path.parent)
    return json.loads(path.read_text(encoding="utf-8"))


def recorded_requests(path: Path | None = None) -> dict[str, dict]:
    """The request behind each recorded answer, by cache key: {"model", "state", "questions"};
    from the provenance file at `path`, by default the one beside the recording in use."""
    return {key: entry["request"] for key, entry in read_provenance(path)["entries"].items()
            if "request" in entry}


def recorded_calls() -> dict[str, str]:
    """The reader's name of each recorded call, by cache key, e.g. "gate T-103 routed to ..."."""
    return {key: entry["call"] for key, entry in read_provenance()["entries"].items()}


def call_named_for(key: str) -> str | None:
    """The reader's name of the call filed under `key`, or None when the provenance cannot say
    (no such key, or the file is missing or unreadable): for messages about a damaged file."""
    try:
        return read_provenance()["entries"][key]["call"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def origin_of(provenance_entry: dict, field: str) -> str:
    """Where one value of a recorded answer came from: "published", "filled: <rule>", "measured"."""
    if field in provenance_entry.get("published", {}):
        return "published"
    if field in provenance_entry.get("filled", {}):
        return f"filled: {provenance_entry['filled'][field]}"
    return "measured"
