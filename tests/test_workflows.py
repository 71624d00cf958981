"""The GitHub workflows and the Dependabot configuration pass actionlint and zizmor, and the
workflows run the README's commands."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO_ROOT

WORKFLOWS_DIR = REPO_ROOT / ".github" / "workflows"
DEPENDABOT = REPO_ROOT / ".github" / "dependabot.yml"
TOOLS_DIR = Path(sys.executable).parent  # actionlint and zizmor are installed beside pytest

# A workflow with one finding for each linter: a misspelt context (actionlint) and an action
# pinned by a movable tag that leaves the token in the checkout (zizmor).
FLAWED_WORKFLOW = """\
name: flawed
on: push
permissions:
  contents: read
jobs:
  flawed:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
      - run: echo "${{ github.evnt.name }}"
"""


def lint(tool: str, *args: str) -> subprocess.CompletedProcess:
    executable = TOOLS_DIR / tool
    assert executable.exists(), f"{tool} is not in {TOOLS_DIR}: run `make setup`"
    return subprocess.run([str(executable), *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)


def actionlint(*paths: Path) -> subprocess.CompletedProcess:
    return lint("actionlint", "-no-color", *map(str, paths))


def zizmor(*paths: Path) -> subprocess.CompletedProcess:
    # Offline: the online audits need the GitHub API, which tests never reach.
    return lint("zizmor", "--offline", "--no-progress", "--color=never", *map(str, paths))


@pytest.fixture(scope="module")
def workflows() -> list[Path]:
    found = sorted(WORKFLOWS_DIR.glob("*.yml"))
    assert [path.name for path in found] == [
        "live-recording.yml", "release.yml", "site-links.yml", "site.yml", "test.yml"]
    return found


def test_actionlint_finds_nothing_in_the_workflows(workflows):
    result = actionlint(*workflows)
    assert result.returncode == 0, result.stdout + result.stderr


def test_zizmor_finds_nothing_in_the_workflows_and_the_dependabot_configuration(workflows):
    result = zizmor(*workflows, DEPENDABOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dependabot_watches_the_python_lock_and_the_pinned_actions():
    updates = yaml.safe_load(DEPENDABOT.read_text(encoding="utf-8"))["updates"]
    assert {(update["package-ecosystem"], update["directory"]) for update in updates} == {
        ("uv", "/"), ("github-actions", "/")}


def test_the_test_workflow_drives_the_runners_chrome_and_installs_no_browser(workflows):
    test = (WORKFLOWS_DIR / "test.yml").read_text(encoding="utf-8")
    assert "MEMORYBOOK_BROWSER: /usr/bin/google-chrome" in test
    assert "chromium" not in test and "playwright install" not in test


def test_the_test_workflow_runs_every_supported_python_and_the_notebooks_on_macos(workflows):
    jobs = yaml.safe_load((WORKFLOWS_DIR / "test.yml").read_text(encoding="utf-8"))["jobs"]
    assert jobs["test"]["strategy"]["matrix"]["python"] == ["3.11", "3.12", "3.13"]
    [make_test] = [step for step in jobs["test"]["steps"] if step.get("run") == "make test"]
    assert make_test["env"]["PYTHON"] == "${{ steps.python.outputs.python-path }}"
    [macos] = [job for job in jobs.values() if job["runs-on"].startswith("macos-")]
    runs = "\n".join(step.get("run", "") for step in macos["steps"])
    assert "make run\ngit diff --stat --exit-code" in runs
    assert ".venv/bin/python -m pytest -p no:xdist notebooks" in runs


def test_both_linters_report_a_flawed_workflow(tmp_path):
    flawed = tmp_path / "flawed.yml"
    flawed.write_text(FLAWED_WORKFLOW, encoding="utf-8")
    found_by_actionlint = actionlint(flawed)
    assert found_by_actionlint.returncode != 0
    assert "evnt" in found_by_actionlint.stdout
    found_by_zizmor = zizmor(flawed)
    assert found_by_zizmor.returncode != 0
    assert "unpinned-uses" in found_by_zizmor.stdout + found_by_zizmor.stderr


def test_ci_runs_the_readme_test_command(workflows):
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert "make test" in readme
    assert "run: make test" in (WORKFLOWS_DIR / "test.yml").read_text(encoding="utf-8")
    assert "\nmake test\n" in (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_the_live_workflow_records_only_with_a_key_and_fails_on_a_changed_figure(workflows):
    live = (WORKFLOWS_DIR / "live-recording.yml").read_text(encoding="utf-8")
    assert "secrets.TYPESAFE_API_KEY" in live
    assert "make record" in live
    assert "published figures reproduce" in live
    assert "Skipped: no TYPESAFE_API_KEY secret is configured" in live


PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def jobs_of(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS_DIR / name).read_text(encoding="utf-8"))["jobs"]


def test_every_action_is_pinned_by_a_full_commit(workflows):
    unpinned = [f"{path.name}: {step['uses']}" for path in workflows
                for job in jobs_of(path.name).values() for step in job.get("steps", [])
                if "uses" in step and not PINNED.match(step["uses"])]
    assert unpinned == [], (
        f"{unpinned}: pin each action by its full commit, its tag in a comment "
        "(`uses: owner/action@<40 hex> # vX.Y.Z`); Dependabot moves the pins")


def test_only_the_publishing_jobs_may_ask_for_an_identity_token(workflows):
    allowed = {("release.yml", "pypi"), ("site.yml", "deploy")}
    found = set()
    for path in workflows:
        workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert "id-token" not in (workflow.get("permissions") or {}), (
            f"{path.name} grants id-token to every job: grant it in the publishing job alone")
        found |= {(path.name, name) for name, job in workflow["jobs"].items()
                  if "id-token" in (job.get("permissions") or {})}
    assert found == allowed, (
        f"jobs with id-token: write: {sorted(found)}; only PyPI's trusted publishing "
        "(release.yml, pypi) and the Pages deployment (site.yml, deploy) need it")


def test_the_site_is_built_on_every_push_and_pull_request_and_published_from_main(workflows):
    site = yaml.safe_load((WORKFLOWS_DIR / "site.yml").read_text(encoding="utf-8"))
    triggers = site[True]  # YAML 1.1 reads the key `on` as True
    assert "push" in triggers and "pull_request" in triggers
    assert any(step.get("run") == "make site" for step in site["jobs"]["build"]["steps"])
    deploy = site["jobs"]["deploy"]
    assert deploy["if"] == "github.event_name == 'push' && github.ref == 'refs/heads/main'"
    assert deploy["environment"]["name"] == "github-pages"
    assert [step["uses"].split("@")[0] for step in deploy["steps"]] == ["actions/deploy-pages"]


def test_links_to_other_hosts_are_checked_weekly_and_not_on_every_push(workflows):
    weekly = yaml.safe_load((WORKFLOWS_DIR / "site-links.yml").read_text(encoding="utf-8"))
    assert set(weekly[True]) == {"schedule", "workflow_dispatch"}
    assert "tools.site_links" in (WORKFLOWS_DIR / "site-links.yml").read_text(encoding="utf-8")
    for path in workflows:
        if path.name != "site-links.yml":
            assert "site_links" not in path.read_text(encoding="utf-8"), path.name


def test_a_version_tag_publishes_make_dists_files_to_pypi_and_the_release(workflows):
    release = yaml.safe_load((WORKFLOWS_DIR / "release.yml").read_text(encoding="utf-8"))
    assert release[True] == {"push": {"tags": ["v*"]}}
    runs = [step.get("run", "") for step in release["jobs"]["dist"]["steps"]]
    assert "make dist" in runs and any("tools/release_notes.py" in run for run in runs)
    publish = [step["uses"].split("@")[0] for step in release["jobs"]["pypi"]["steps"]]
    assert publish[-1] == "pypa/gh-action-pypi-publish"
    assert not any("password" in step.get("with", {})
                   for step in release["jobs"]["pypi"]["steps"]), "trusted publishing: no token"
    attach = release["jobs"]["github-release"]["steps"][-1]["run"]
    assert "gh release create" in attach and "dist/*" in attach
