"""Small helpers the tests share."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from lzstring import LZString

REPO_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
PUBLISHED = REPO_ROOT / "tests" / "published"
LINK = re.compile(r"\[([^\]]+)\]\((https://console\.typesafe\.ai/playground#share/[^)]+)\)")


def decode(link: str) -> tuple[dict, dict, dict]:
    """A playground link's state, questions and whole share payload."""
    share = json.loads(LZString.decompressFromEncodedURIComponent(link.split("#share/", 1)[1]))
    return json.loads(share["documentText"]), json.loads(share["promptsText"]), share


def notebook(name: str) -> dict:
    path = next(p for p in NOTEBOOKS if p.name.startswith(name))
    return json.loads(path.read_text(encoding="utf-8"))


def stdout_text(nb: dict) -> str:
    """Everything a notebook's cells printed, in order, as one text."""
    return "".join(
        "".join(output.get("text", ""))
        for cell in nb["cells"]
        for output in cell.get("outputs", [])
        if output.get("output_type") == "stream" and output.get("name") == "stdout"
    )


def markdown_outputs(nb: dict) -> list[str]:
    return [
        "".join(output["data"]["text/markdown"])
        for cell in nb["cells"]
        for output in cell.get("outputs", [])
        if "text/markdown" in output.get("data", {})
    ]


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter with no API key, outside the notebooks' usage log."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("TYPESAFE_API_KEY", "MEMORYBOOK_USAGE_LOG", "CI")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO_ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=120,
    )
