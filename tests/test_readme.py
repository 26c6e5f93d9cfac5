"""The README's commands and code run as written: `bin/demo` on the embedded default, and
every ```python block, against handler modules named as the README names them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)

# The handler modules the README's samples name, as an application would write them.
HANDLERS = {
    "billing/jobs.py": "class Refund:\n    def run(self, data):\n        return 'refunded'\n",
    "reports/jobs.py": "def daily(data):\n    return 'reported'\n",
    "search/jobs.py": "def reindex(data):\n    return 'reindexed'\n",
}


def _environment(home: Path, path: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DELAYQ_")}
    env.update(DELAYQ_HOME=str(home), PYTHONPATH=os.pathsep.join([str(path), str(ROOT)]))
    return env


def _stop_embedded(env: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, "-m", "delayq", "embedded-stop"], env=env, capture_output=True, check=False
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
    env["DELAYQ_HANDLERS"] = "billing,reports,search"
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


def test_the_demo_runs(tmp_path):
    env = _environment(tmp_path / "home", tmp_path)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    try:
        result = subprocess.run(
            [str(ROOT / "bin" / "demo")], env=env, capture_output=True, text=True, timeout=120
        )
    finally:
        _stop_embedded(env)
    assert result.returncode == 0, result.stderr
    for line in ("$ delayq run -v", "$ delayq status", "refunded request 1001 (25 EUR)"):
        assert line in result.stdout, result.stdout
