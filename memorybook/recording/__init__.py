"""The recording: cooksafe's JSON cache of System One answers, read safely and written safely.

    file.py        reading the file with errors that name it; adding answers under a lock
    appending.py   an answer added in place, undone if its writer dies: cost not growing with
                   the file
    commit.py      files replaced both or neither (an accept's)
    disk.py        the writers' lock, file modes, synced writes: what every writer shares
    checks.py      what can be wrong with an entry, or with an answer to the call's questions
    cache.py       CheckedJsonCache and open_recording: the cache the notebooks decorate with
    provenance.py  json_cache/provenance.json, read in this one place
    origins.py     the recording's summary, and where each recorded value came from
    state_parts.py what a request's state holds: its ticket, customer and memories
"""

from memorybook.recording.cache import (
    CheckedJsonCache,
    cache_key,
    check_answer,
    cooksafe_key,
    open_recording,
    system_one_request,
)
from memorybook.recording.checks import ROUNDING, answer_problem, entry_shape_problem
from memorybook.recording.commit import CommitError, commit_together, finish_pending_commit
from memorybook.recording.file import (
    RecordingError,
    append_entries,
    canonical_text,
    read_recording,
    stop_writing,
    write_text_atomically,
)
from memorybook.recording.origins import (
    RecordedAnswer,
    leaf_values,
    recorded_noul_answers,
    recording_summary,
)
from memorybook.recording.provenance import (
    call_named_for,
    origin_of,
    read_provenance,
    recorded_calls,
    recorded_requests,
)
from memorybook.recording.state_parts import (
    customer_of,
    describe_call,
    is_memory_list,
    memory_ids_in,
    memory_ticket_ids,
    ticket_of,
)

__all__ = [
    "CheckedJsonCache", "cache_key", "check_answer", "cooksafe_key", "open_recording",
    "system_one_request",
    "ROUNDING", "answer_problem", "entry_shape_problem",
    "CommitError", "commit_together", "finish_pending_commit",
    "RecordingError", "append_entries", "canonical_text", "read_recording", "stop_writing",
    "write_text_atomically",
    "RecordedAnswer", "leaf_values", "recorded_noul_answers",
    "recording_summary",
    "call_named_for", "origin_of", "read_provenance", "recorded_calls", "recorded_requests",
    "customer_of", "describe_call", "is_memory_list", "memory_ids_in", "memory_ticket_ids",
    "ticket_of",
]
