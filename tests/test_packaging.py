"""What the built package ships: the PEP 561 marker that says its annotations are meant."""

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_built_package_ships_py_typed(tmp_path):
    # A copy of what a build reads (no egg-info, no caches), built the way a wheel is:
    # setuptools' build_py lays out exactly the files a wheel of the package holds.
    source = tmp_path / "source"
    source.mkdir()
    shutil.copytree(REPO / "albedo_actors", source / "albedo_actors", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.cfg", "pyproject.toml", "README.rst"):
        shutil.copy(REPO / name, source / name)
    built = tmp_path / "built"
    subprocess.run(
        [sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_py", "--build-lib", str(built)],
        cwd=source, check=True, capture_output=True, timeout=60,
    )
    assert (built / "albedo_actors" / "__init__.py").is_file()  # the build did build the package
    assert (built / "albedo_actors" / "py.typed").is_file()
