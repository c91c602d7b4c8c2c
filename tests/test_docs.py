"""The documentation (issue 25, item 10): docs/ is built by Sphinx, and one warning fails
the build; README.rst, the front page and the package's long description, is valid
reStructuredText that keeps the two set-up commands and links only to pages that exist;
and the Python API examples of docs/python-api.rst run as pasted into a fresh home,
against the bundled demo server that their first command adds.
"""

import ast
import io
import os
import re
import subprocess
import sys
import textwrap

import docutils.core
import docutils.utils

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(REPO, "docs")
README = os.path.join(REPO, "README.rst")
PYTHON_API = os.path.join(DOCS, "python-api.rst")
TIMEOUT = 120  # a bound on each build and each example, never an expected duration


def test_the_docs_build_without_a_warning(tmp_path):
    # -W turns every warning into a failure and --keep-going reports them all first; -n
    # (nitpicky) also warns about every reference that resolves to nothing. The dummy
    # builder reads, resolves and checks every page as the HTML one does, writing nothing;
    # a page in no toctree warns.
    built = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "dummy",
         "-d", str(tmp_path / "doctrees"), DOCS, str(tmp_path / "out")],
        capture_output=True, text=True, timeout=TIMEOUT,
    )
    assert built.returncode == 0, built.stderr
    assert "WARNING" not in built.stderr and "ERROR" not in built.stderr, built.stderr


def test_the_readme_is_valid_restructuredtext_with_the_two_commands_and_live_links():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    warnings = io.StringIO()
    try:
        docutils.core.publish_doctree(text, source_path=README, settings_overrides={
            "halt_level": 2, "report_level": 2, "warning_stream": warnings})
    except docutils.utils.SystemMessage as problem:
        raise AssertionError(f"README.rst: {problem}") from None
    assert warnings.getvalue() == ""
    assert "::\n\n    scripts/demo\n    scripts/test\n" in text
    links = re.findall(r"<(docs/[^>]+)>`_", text)
    assert links and [link for link in links if not os.path.isfile(os.path.join(REPO, link))] == []


def _block_after(text: str, marker: str) -> str:
    """The literal block that ends the paragraph holding ``marker``, dedented."""
    start = text.index("::\n", text.index(marker)) + len("::\n")
    lines = []
    for line in text[start:].split("\n")[1:]:
        if line and not line.startswith(" "):
            break
        lines.append(line)
    return textwrap.dedent("\n".join(lines)).strip("\n") + "\n"


def _run(argv, env, cwd):
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, f"{argv[:2]} exited {done.returncode}: {done.stderr}"
    return done.stdout


def test_the_python_api_examples_run_as_pasted_into_a_fresh_home(tmp_path):
    with open(PYTHON_API, encoding="utf-8") as f:
        page = f.read()
    add = _block_after(page, "Add the bundled demo server")
    sync_host = _block_after(page, "A sync host with several sessions")
    async_host = _block_after(page, "An asyncio host")
    one_session = _block_after(page, "``Runtime`` takes the same")
    assert add.startswith(".venv/bin/albedo-mcp add ") and "Daemon(home, store)" in sync_host
    assert "asyncio.run(main())" in async_host and "Runtime(home, store, enabled=True)" in one_session
    assert os.path.isfile(os.path.join(REPO, ".venv", "bin", "albedo-mcp")), "scripts/test makes .venv"

    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ALBEDO_STORE_") and k not in ("ALBEDO_DATABASE_URL", "ALBEDO_HOME")}
    env.update(ALBEDO_HOME=str(tmp_path / "home"), ALBEDO_NO_BROWSER="1")

    # The shell line, as pasted in the repository's root (where .venv is).
    assert "added demo-server (stdio, catalogue saved)" in _run(["bash", "-c", add], env, REPO)

    out = _run([sys.executable, "-c", sync_host], env, str(tmp_path)).splitlines()
    names = ast.literal_eval(out[0])  # the printed list of advertised names
    assert [name.split("_")[2] for name in names] == ["echo", "add", "time", "read", "get"]
    assert all(name.startswith("mcp_demo-server_") for name in names)
    assert out[1] == "hi False"  # the echo's text, and no tool error
    assert "MCP server 'demo-server' says" in out[2]

    out = _run([sys.executable, "-c", async_host], env, str(tmp_path)).splitlines()
    assert ast.literal_eval(out[0]) == names
    assert out[1:3] == ["one", '{"sum":3}'] and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", out[3])

    # The one-session example goes on from the sync host's home and store.
    preamble = "\n".join(line for line in sync_host.splitlines()
                         if line.startswith(("from ", "home = ", "store = ")))
    _run([sys.executable, "-c", preamble + "\n" + one_session + "store.close()\n"], env, str(tmp_path))
