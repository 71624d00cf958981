"""Each playground link opens exactly the call it names, and that call is in the recording."""

import json
import re

from memorybook.config import RECORDING_PATH, TYPESAFE_MODEL
from memorybook.recording import cache_key, memory_ids_in, read_recording
from tests.helpers import LINK, decode, markdown_outputs, notebook

ROW = re.compile(r"^\| (C-\d+) \| ([^|]+?) \| (.*) \| (.*) \|$", re.M)


def test_every_link_opens_a_recorded_call_with_the_pinned_model():
    recording = read_recording(RECORDING_PATH)
    links = [url for text in markdown_outputs(notebook("05")) for _, url in LINK.findall(text)]
    assert len(links) == 13
    for url in links:
        state, questions, share = decode(url)
        assert share["selectedModels"] == [TYPESAFE_MODEL] and share["apiVersion"] == "v1"
        assert list(questions) == ["team"]
        assert cache_key(TYPESAFE_MODEL, json.dumps(state), json.dumps(questions)) in recording


def test_the_official_link_holds_c1042s_slow_dashboards_with_t101_and_t105():
    official = markdown_outputs(notebook("05"))[0]
    (label, url), = LINK.findall(official)
    state, _, _ = decode(url)
    assert "C-1042" in label and "T-101 and T-105" in label
    assert state["customer"]["id"] == "C-1042" and state["ticket"]["id"] == "T-201"
    assert state["ticket"]["subject"] == "Slow dashboards"
    assert memory_ids_in(state) == ["T-101", "T-105"]


def test_each_table_row_links_the_plain_and_the_remembered_state_it_names():
    table = markdown_outputs(notebook("05"))[1]
    rows = ROW.findall(table)
    assert len(rows) == 6
    for customer, subject, plain_cell, memory_cell in rows:
        (plain_label, plain_url), = LINK.findall(plain_cell)
        (memory_label, memory_url), = LINK.findall(memory_cell)
        plain, _, _ = decode(plain_url)
        remembered, _, _ = decode(memory_url)
        for state in (plain, remembered):
            assert state["customer"]["id"] == customer and state["ticket"]["subject"] == subject
        assert plain_label == "plain state" and memory_ids_in(plain) == []
        assert memory_label == "with " + ", ".join(memory_ids_in(remembered))
        assert {k: v for k, v in remembered.items() if k in plain} == plain
