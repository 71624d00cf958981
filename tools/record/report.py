"""The report after a recording: figure by figure against the published page, then call by call
against the committed recording."""

from __future__ import annotations

from memorybook.config import RECORDING_PATH, TYPESAFE_MODEL
from memorybook.recording import read_provenance, read_recording, recorded_calls
from tools.build_recording import read_figures


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
    provenance = read_provenance()["entries"]
    key_of_row = {tuple(entry["table_row"].values()): key for key, entry in provenance.items()
                  if "table_row" in entry}
    lines, reproduced, figures = ["Published figures:"], 0, 0
    for call, row in read_figures().items():
        entry = new.get(key_of_row.get(call))
        label, published = published_figure(row)
        now = answer_summary(entry) if entry else "not asked (an earlier answer changed)"
        same = entry is not None and reproduces(published, now)
        figures += 1
        reproduced += same
        lines.append(f"  {label}: published {published}, now {now}"
                     + ("" if same else "   <- differs"))
    lines.append(f"{reproduced} of {figures} published figures reproduce.\n")
    calls = recorded_calls()
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
