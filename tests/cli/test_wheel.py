"""A wheel built from the source tree works where the source tree is not.

The editable install the tests otherwise run against reads every file from the
checkout, so a file missing from the wheel (the TUI's stylesheet was) went unnoticed
until ``picobot tui`` crashed after a plain ``pip install .``. This test builds the
wheel offline, installs it without dependencies into a fresh venv that sees this
venv's dependencies (through a ``.pth`` file listing its site directories: ``.pth``
files inside them, such as the editable install's finder, are not processed) but not
the checkout, and runs the installed package there.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import picobot

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "picobot"

# Runs inside the fresh venv: the real runtime (SQLite file, scripted model) behind the
# Textual app, headless, one turn, with the stylesheet loaded from the installed file.
TUI_SCRIPT = """
import asyncio, sys
from pathlib import Path
from picobot.channels.tui.app import PicoBotApp
from picobot.channels.tui.backend import LocalBackend, tui_identity
from picobot.config.settings import DataSettings, LLMSettings, Settings
from picobot.runtime import open_runtime

async def main() -> None:
    settings = Settings(data=DataSettings(dir=sys.argv[1]), llm=LLMSettings(provider="scripted"))
    async with open_runtime(settings) as rt:
        app = PicoBotApp(LocalBackend(rt.kernel, tui_identity(settings), "scripted"))
        async with app.run_test() as pilot:
            await pilot.press(*"hello", "enter")
            for _ in range(100):  # until the turn's job has run
                await app.workers.wait_for_complete()
                await pilot.pause()
                if not app.busy:
                    break
            _, stored = await app.backend.history(10)
            print("css", Path(PicoBotApp.CSS_PATH).resolve())
            print("rules", len(app.stylesheet.rules))
            print("stored", stored)

asyncio.run(main())
"""


def package_data_files() -> list[str]:
    """Every file under picobot/ that is not Python source, relative to the package."""
    return sorted(
        p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    )


def run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run ``argv``; fail the test with its output when it exits non-zero."""
    # Only this venv's interpreters and the built venv's, with fixed arguments.
    done = subprocess.run(  # noqa: S603
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{argv[:3]} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel built from this checkout; returns its python."""
    if importlib.util.find_spec("setuptools") is None:
        pytest.fail("setuptools is missing from this venv (the [dev] extra): run `make install`")
    tmp = tmp_path_factory.mktemp("wheel")
    # setuptools writes build/ and *.egg-info into the tree it builds: build a copy.
    src = tmp / "src"
    shutil.copytree(PACKAGE, src / "picobot", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    # Offline by construction: no index, no build isolation (setuptools comes from this
    # venv, which `make install` provides through the [dev] extra).
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    build = ["wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", "dist", str(src)]
    run([*pip, *build], cwd=tmp)
    (wheel,) = (tmp / "dist").glob("picobot_kernel-*.whl")
    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp)
    python = venv / "bin" / "python"
    run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)], cwd=tmp)
    purelib = Path(run([str(python), "-I", "-c", PURELIB], cwd=tmp).strip())
    dependencies = {*site.getsitepackages(), sysconfig.get_paths()["purelib"]}
    (purelib / "dependencies.pth").write_text("\n".join(sorted(dependencies)) + "\n")
    return python


PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"


def clean_env() -> dict[str, str]:
    """The environment without the variables that would point Python at the checkout."""
    drop = {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH"}
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("PICOBOT_")}


def test_the_wheel_holds_every_package_data_file(installed: Path, tmp_path: Path) -> None:
    expected = package_data_files()
    assert "channels/tui/app.tcss" in expected and "py.typed" in expected
    script = (
        "import importlib.metadata, importlib.resources, sys, picobot\n"
        "root = importlib.resources.files('picobot')\n"
        "print(picobot.__file__)\n"
        # The distribution's own name: "picobot" on the package index is another project.
        f"print(picobot.__version__, importlib.metadata.version({picobot.DISTRIBUTION!r}))\n"
        "for rel in sys.argv[1:]:\n"
        "    print(rel, root.joinpath(rel).is_file())\n"
    )
    out = run([str(installed), "-I", "-c", script, *expected], cwd=tmp_path, env=clean_env())
    location, versions, *files = out.splitlines()
    # The installed copy, not the checkout: otherwise this test would prove nothing.
    assert Path(location).is_relative_to(installed.parent.parent), location
    assert versions == f"{picobot.__version__} {picobot.__version__}"
    assert files == [f"{rel} True" for rel in expected]


def test_the_installed_command_and_tui_run(installed: Path, tmp_path: Path) -> None:
    command = installed.parent / "picobot"
    env = clean_env()
    version = run([str(command), "--version"], cwd=tmp_path, env=env)
    assert version == f"picobot {picobot.__version__}\n"
    argv = [str(installed), "-I", "-c", TUI_SCRIPT, str(tmp_path / "data")]
    out = run(argv, cwd=tmp_path, env=env)
    css, rules, stored = out.splitlines()
    assert Path(css.removeprefix("css ")).is_relative_to(installed.parent.parent), css
    assert int(rules.removeprefix("rules ")) > 0
    assert stored.startswith("stored [('user', 'hello'), ('assistant',"), stored
