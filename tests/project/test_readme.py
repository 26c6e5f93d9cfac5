"""The README's commands and code run as written: `bin/demo` on the embedded default, the
Quickstart's shell lines in an empty directory, and every ```python block of the README and
of docs/, against handler modules named as the README names them; and every link between
them leads somewhere."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DELAYQ, ROOT
from tests.support.embedded_processes import embedded_processes_under
from tests.support.waiting import wait_for

README = (ROOT / "README.md").read_text()
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYTHON_BLOCKS = [
    block
    for document in DOCUMENTS
    for block in re.findall(r"```python\n(.*?)```", document.read_text(), re.S)
]
QUICKSTART = re.search(r"^## Quickstart\n.*?```sh\n(.*?)```", README, re.S | re.M)

# A block opening with `# NAME.py` is a file the reader saves: the samples after it import it.
MODULES = {
    match.group(1): block for block in PYTHON_BLOCKS if (match := re.match(r"# (\w+\.py)\n", block))
}
API_SAMPLE = re.search(
    r"^## The Python API\n.*?```python\n# jobs\.py\n.*?```python\n(.*?)```", README, re.S | re.M
)
# The handler modules docs/ names, as an application would write them.
HANDLERS = {
    "billing/jobs.py": "class Refund:\n    def run(self, data):\n        return 'refunded'\n",
    **MODULES,
}


def _environment(home: Path, path: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DELAYQ_")}
    env.update(DELAYQ_HOME=str(home), PYTHONPATH=os.pathsep.join([str(path), str(ROOT)]))
    return env


def _new_users_environment() -> dict[str, str]:
    """This environment without DELAYQ_* and PYTHONPATH: what a new user's shell has."""
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("DELAYQ_") and key != "PYTHONPATH"
    }


def _run_in(where: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=where, env=env, capture_output=True, text=True, timeout=120)


def _stop_embedded(env: dict[str, str], where: Path | None = None) -> None:
    subprocess.run(
        [sys.executable, "-m", "delayq", "embedded-stop"],
        cwd=where,
        env=env,
        capture_output=True,
        check=False,
    )


def test_the_readme_has_python_samples():
    assert PYTHON_BLOCKS, "no ```python block found: the extraction is broken"


@pytest.mark.parametrize("number", range(len(PYTHON_BLOCKS)))
def test_every_python_sample_runs(number, tmp_path):
    for name, text in HANDLERS.items():
        module = tmp_path / "app" / name
        module.parent.mkdir(parents=True, exist_ok=True)
        (module.parent / "__init__.py").touch()
        module.write_text(text)
    env = _environment(tmp_path / "home", tmp_path / "app")
    env["DELAYQ_HANDLERS"] = "billing,jobs"
    try:
        result = subprocess.run(
            [sys.executable, "-c", PYTHON_BLOCKS[number]],
            cwd=tmp_path / "app",
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        _stop_embedded(env)
    assert result.returncode == 0, result.stderr


def test_the_python_api_sample_runs_as_copied_in_an_empty_directory(tmp_path):
    """The README's two files saved side by side, run with no DELAYQ_* and no PYTHONPATH: the
    handler module is found beside the script, the state kept under ./.delayq."""
    assert API_SAMPLE and "jobs.py" in MODULES, "the README's API sample was not found"
    (tmp_path / "jobs.py").write_text(MODULES["jobs.py"])
    (tmp_path / "sample.py").write_text(API_SAMPLE.group(1))
    env = _new_users_environment()
    try:
        result = _run_in(tmp_path, env, sys.executable, "sample.py")
    finally:
        _stop_embedded(env, tmp_path)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert result.stdout == "1 0\n"  # the retried refund ran, and succeeded


def test_the_demo_runs(tmp_path):
    env = _environment(tmp_path / "home", tmp_path)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    try:
        result = subprocess.run(
            [str(ROOT / "bin" / "demo")], env=env, capture_output=True, text=True, timeout=120
        )
        # The demo stops the server it started: neither it nor its keeper is left.
        wait_for(lambda: not embedded_processes_under(tmp_path), 15, "the demo's server to stop")
    finally:
        _stop_embedded(env)
    assert result.returncode == 0, result.stderr
    for line in ("$ delayq run -v", "$ delayq status", "refunded request 1001 (25 EUR)"):
        assert line in result.stdout, result.stdout


def test_the_quickstart_runs_in_an_empty_directory(tmp_path):
    """As a new user types it: the installed `delayq` command, no DELAYQ_* and no PYTHONPATH,
    so the handler module is found in the working directory alone."""
    assert QUICKSTART, "no ```sh block under ## Quickstart: the extraction is broken"
    env = _new_users_environment()
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    try:
        result = _run_in(tmp_path, env, "bash", "-euo", "pipefail", "-c", QUICKSTART.group(1))
    finally:
        left_running = subprocess.run(
            ["delayq", "embedded-stop"], cwd=tmp_path / "shop", env=env, capture_output=True
        )
    assert result.returncode == 0, result.stderr
    shown = dict(re.findall(r"^(\w+) +(.*)$", result.stdout, re.M))
    assert shown["status"] == "success", result.stdout
    assert shown["message"] == "mailed ann@example.com", result.stdout
    assert result.stdout.rstrip().endswith("stopped"), result.stdout
    assert left_running.stdout == b"not running\n", left_running


DOCTOR_SAMPLE = re.search(r"^```\n\$ delayq doctor\n(.*?)```", README, re.S | re.M)
VERSION = re.compile(r"\b\d+\.\d+(\.\d+)*\b")


def test_the_doctor_sample_is_what_doctor_prints_after_init(tmp_path):
    """The README's `delayq doctor` on the embedded default, line for line; only the SQLite
    and Redis versions, which differ by machine, are left out of the comparison."""
    assert DOCTOR_SAMPLE, "no ``` block opening with `$ delayq doctor`: the extraction is broken"
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "__init__.py").touch()
    (tmp_path / "shop" / "handlers.py").write_text("class Refund:\n    def run(self, data): ...\n")
    env = dict(_new_users_environment(), DELAYQ_HANDLERS="shop.handlers")
    try:
        assert _run_in(tmp_path, env, *DELAYQ, "init").returncode == 0
        result = _run_in(tmp_path, env, *DELAYQ, "doctor")
    finally:
        _stop_embedded(env, tmp_path)
    assert (result.returncode, result.stderr) == (0, "")
    assert VERSION.sub("V", result.stdout) == VERSION.sub("V", DOCTOR_SAMPLE.group(1))


def _anchors(text: str) -> set[str]:
    """The anchors a Markdown renderer gives the headings of `text`, as GitHub makes them."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    headings = re.findall(r"^#+ +(.+?) *$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_every_link_leads_somewhere(document):
    text = document.read_text()
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"```.*?```", "", text, flags=re.S)):
        if re.match(r"[a-z]+:", target):
            continue  # an address outside the repository
        path, _, anchor = target.partition("#")
        linked = (document.parent / path).resolve() if path else document
        if not linked.exists() or (anchor and anchor not in _anchors(linked.read_text())):
            broken.append(target)
    assert not broken, f"{document.name} links to what is not there: {broken}"


def test_the_command_table_names_every_command():
    """A command the table leaves out is one a reader of the README never learns of."""
    import typer

    from delayq.cli import app

    table = re.search(r"^\| command \| effect \|.*?\n\n", README, re.S | re.M)
    assert table, "the README has no command table"
    listed = set(re.findall(r"^\| `delayq ([a-z-]+)", table.group(0), re.M))
    commands = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    assert commands - listed == set(), f"the README's command table lacks {commands - listed}"
