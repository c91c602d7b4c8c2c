"""The command line's polish (issue 25, item 7), through the real console script.

- A reader that goes away (``albedo-mcp tools | head -1``) ends the run quietly: exit
  141, nothing on stderr (no BrokenPipeError traceback, no "Exception ignored").
- ``completion bash|zsh|fish`` prints argcomplete's script, and the script completes in
  the real shell: bash always, zsh and fish where they are installed (scripts/test
  installs them; under CI=true their absence fails, as every skip does).
- ``servers`` on an empty home says how to add one; with ``--json`` it prints ``[]``.
- With ``--json`` a failure is also ``{"error": {...}}`` on stdout.

The servers are the bundled demo server and the fault server, started by the runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from helpers import FAULT_SERVER

RUN_TIMEOUT = 60  # seconds; a bound on every command, never an expected duration
BIN = os.path.dirname(sys.executable)
CONSOLE_SCRIPT = os.path.join(BIN, "albedo-mcp")


def demo_entry() -> dict:
    from albedo_actors.demo.run import SERVER

    return {"command": sys.executable, "args": ["-I", SERVER]}


def write_config(home, servers: dict) -> None:
    (home / "extensions.json").write_text(json.dumps({"mcp": {"servers": servers}}), encoding="utf-8")


def albedo(home, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([CONSOLE_SCRIPT, "--home", str(home), *argv], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT, env=env)


def with_closed_stdout(*argv: str) -> subprocess.CompletedProcess:
    """Run the console script with stdout a pipe whose reader has already gone: its
    first write to stdout (or its flush) fails with EPIPE, as under `| head -1` once
    head has exited."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([CONSOLE_SCRIPT, *argv], stdout=write_end, stderr=subprocess.PIPE, text=True,
                              timeout=RUN_TIMEOUT)
    finally:
        os.close(write_end)


# -- a closed pipe -----------------------------------------------------------------------


@pytest.mark.parametrize("argv, code", [
    pytest.param(["tools"], 141, id="tools"),
    pytest.param(["tools", "--json"], 141, id="tools-json"),
    pytest.param(["servers"], 141, id="servers"),
    pytest.param(["call", "demo/echo", "--args", '{"text": "hi"}'], 141, id="call"),
    pytest.param(["completion", "bash"], 141, id="completion"),
    pytest.param(["--help"], 141, id="help"),
    pytest.param(["call", "--help"], 141, id="call-help"),
])
def test_a_closed_pipe_ends_quietly(tmp_path, argv, code):
    write_config(tmp_path, {"demo": demo_entry(), "other": demo_entry()})
    run = with_closed_stdout("--home", str(tmp_path), *argv)
    assert run.stderr == ""  # no traceback, no "Exception ignored ... BrokenPipeError"
    assert run.returncode == code


def test_servers_piped_into_head_ends_quietly(tmp_path):
    # A real `| head -1` under pipefail: 3000 servers are far more than a pipe's buffer,
    # so the listing is still writing when head exits after its first line.
    write_config(tmp_path, {f"server{i:04}": {"url": f"https://mcp{i}.example.com/mcp"} for i in range(3000)})
    script = 'set -o pipefail; "$0" --home "$1" servers | head -1; echo "status=$?" >&2'
    run = subprocess.run(["bash", "-c", script, CONSOLE_SCRIPT, str(tmp_path)], capture_output=True, text=True,
                         timeout=RUN_TIMEOUT)
    assert run.stdout.startswith("server0000\thttp\t") and run.stdout.count("\n") == 1
    assert run.stderr == "status=141\n"


def test_an_error_line_on_a_closed_stderr_ends_quietly(tmp_path):
    # `albedo-mcp ... 2>&1 | head -0`: the one error line itself meets the closed pipe.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        run = subprocess.run([CONSOLE_SCRIPT, "--home", str(tmp_path), "call", "nope/echo"], stdout=write_end,
                             stderr=write_end, timeout=RUN_TIMEOUT)
    finally:
        os.close(write_end)
    assert run.returncode == 141


# -- completion -------------------------------------------------------------------------


def shell_env(home) -> dict:
    # The completion script runs `albedo-mcp` from PATH, as a user's shell would.
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), ALBEDO_HOME=str(home))
    env.pop("_ARGCOMPLETE", None)
    return env


def bash_completes(home, line: str) -> list[str]:
    script = ('source <(albedo-mcp completion bash) && COMP_LINE="$1" && COMP_POINT=${#COMP_LINE} '
              '&& _python_argcomplete albedo-mcp && printf "%s\\n" "${COMPREPLY[@]}"')
    run = subprocess.run(["bash", "-c", script, "bash", line], capture_output=True, text=True, timeout=RUN_TIMEOUT,
                         env=shell_env(home))
    assert run.returncode == 0, run.stderr
    return [word.strip() for word in run.stdout.splitlines() if word.strip()]


def test_bash_completes_a_subcommand_its_options_and_a_servers_name(tmp_path):
    write_config(tmp_path, {"alpha": {"url": "https://a.example.com/mcp"}, "beta": {"url": "https://b.example.com/mcp"}})
    assert sorted(bash_completes(tmp_path, "albedo-mcp ser")) == ["serve", "servers"]
    assert sorted(bash_completes(tmp_path, "albedo-mcp co")) == ["completion"]
    assert "--json" in bash_completes(tmp_path, "albedo-mcp tools --j")
    # A command's NAME: the configured servers (read from extensions.json), no options.
    assert sorted(bash_completes(tmp_path, "albedo-mcp remove ")) == ["alpha", "beta"]
    assert bash_completes(tmp_path, "albedo-mcp enable b") == ["beta"]
    assert bash_completes(tmp_path, "albedo-mcp completion f") == ["fish"]


def test_completion_of_a_name_in_a_broken_home_offers_nothing_and_prints_nothing(tmp_path):
    (tmp_path / "extensions.json").write_text("{not json", encoding="utf-8")
    assert bash_completes(tmp_path, "albedo-mcp remove ") == []


def needs_shell(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (scripts/test installs it with apt-get)")
    return path


def test_zsh_completes_a_subcommand(tmp_path):
    zsh = needs_shell("zsh")
    # compinit loads zsh's completion system; _describe, the one function of it that needs
    # a live line editor, is replaced by one that prints what it was given.
    script = ('autoload -Uz compinit && compinit -u -D && source <(albedo-mcp completion zsh) '
              '&& _describe() { print -rl -- "${(@P)2}" } '
              '&& words=(albedo-mcp ser) && BUFFER="albedo-mcp ser" && CURSOR=${#BUFFER} && _python_argcomplete')
    run = subprocess.run([zsh, "-f", "-c", script], capture_output=True, text=True, timeout=RUN_TIMEOUT,
                         env=shell_env(tmp_path), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert sorted(line.partition(":")[0] for line in run.stdout.splitlines()) == ["serve", "servers"]


def test_fish_completes_a_subcommand(tmp_path):
    fish = needs_shell("fish")
    script = 'albedo-mcp completion fish | source; and complete -C "albedo-mcp ser"'
    env = shell_env(tmp_path)
    env["XDG_CONFIG_HOME"] = env["XDG_DATA_HOME"] = str(tmp_path)  # fish writes its own files there
    run = subprocess.run([fish, "--no-config", "-c", script], capture_output=True, text=True,
                         timeout=RUN_TIMEOUT, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert sorted(line.partition("\t")[0] for line in run.stdout.splitlines()) == ["serve", "servers"]


def test_completion_refuses_an_unknown_shell_with_one_line(tmp_path):
    run = albedo(tmp_path, "completion", "powershell")
    assert run.returncode == 2 and run.stdout == ""
    assert len(run.stderr.splitlines()) == 1 and "'bash', 'zsh', 'fish'" in run.stderr


# -- servers on an empty home --------------------------------------------------------------


def test_servers_on_an_empty_home_says_how_to_add_one(tmp_path):
    run = albedo(tmp_path, "servers")
    assert (run.returncode, run.stdout) == (0, "")  # stdout holds only the list
    assert run.stderr == "albedo-mcp: no servers yet; add one: albedo-mcp add URL | 'COMMAND LINE'\n"
    listed = albedo(tmp_path, "servers", "--json")
    assert (listed.returncode, listed.stdout, listed.stderr) == (0, "[]\n", "")


def test_servers_with_one_server_gives_no_hint(tmp_path):
    write_config(tmp_path, {"demo": demo_entry()})
    run = albedo(tmp_path, "servers")
    assert run.returncode == 0 and run.stderr == ""
    assert run.stdout.startswith("demo\tstdio\t")


# -- --json failures --------------------------------------------------------------------------


def json_failure(run: subprocess.CompletedProcess, code: int) -> dict:
    """Exit ``code``; one line on stderr; stdout exactly one JSON error object, whose
    message is the stderr line without the program's name."""
    assert run.returncode == code, run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.splitlines()) == 1
    document = json.loads(run.stdout)
    assert list(document) == ["error"] and set(document["error"]) == {"type", "message", "server", "exit"}
    error = document["error"]
    assert run.stderr == f"albedo-mcp: {error['message']}\n"
    assert error["exit"] == code
    return error


def test_json_failure_of_a_server_that_cannot_start_names_it(tmp_path):
    write_config(tmp_path, {"broken": {"command": sys.executable, "args": [str(tmp_path / "missing.py")]}})
    error = json_failure(albedo(tmp_path, "call", "broken/echo", "--json"), 3)
    assert error["type"] == "Unavailable" and error["server"] == "broken"
    assert "server 'broken'" in error["message"]


def test_json_failure_of_a_timed_out_call(tmp_path):
    write_config(tmp_path, {"faulty": {"command": sys.executable, "args": [FAULT_SERVER], "callTimeoutMs": 300}})
    error = json_failure(albedo(tmp_path, "call", "faulty/hang", "--json"), 5)
    assert (error["type"], error["server"]) == ("TimedOut", "faulty")


@pytest.mark.parametrize("argv, code, kind", [
    pytest.param(["call", "nope/echo", "--json"], 2, "ConfigError", id="call-unknown-server"),
    pytest.param(["call", "demo/echo", "--args", "[1]", "--json"], 2, "Usage", id="call-bad-args"),
    pytest.param(["call", "--json"], 2, "Usage", id="parse-error"),
    pytest.param(["tools", "--json", "--timeout", "1"], 2, "Usage", id="unknown-option"),
    pytest.param(["extension", "nosuch", "on", "--json"], 2, "ConfigError", id="extension"),
])
def test_json_failures_of_usage_and_configuration(tmp_path, argv, code, kind):
    write_config(tmp_path, {"demo": demo_entry()})
    error = json_failure(albedo(tmp_path, *argv), code)
    assert error["type"] == kind and error["server"] is None


def test_json_failure_names_the_server_its_line_names(tmp_path):
    write_config(tmp_path, {"demo": demo_entry()})
    error = json_failure(albedo(tmp_path, "call", "demo/echo", "text:=5", "--json"), 2)
    assert (error["type"], error["server"]) == ("Usage", "demo")
    assert error["message"].startswith("server 'demo': tool 'echo': parameter 'text' must be")


def test_json_failure_of_an_unreadable_configuration_in_tools(tmp_path):
    (tmp_path / "extensions.json").write_text("{not json", encoding="utf-8")
    error = json_failure(albedo(tmp_path, "tools", "--json"), 2)
    assert error["type"] == "ConfigError" and "extensions.json" in error["message"]


def test_without_json_a_failure_prints_nothing_on_stdout(tmp_path):
    run = albedo(tmp_path, "call", "nope/echo")
    assert (run.returncode, run.stdout) == (2, "")
    assert len(run.stderr.splitlines()) == 1


def test_json_failure_in_process_is_the_same_object(tmp_path, capsys):
    from albedo_actors.cli import main

    code = main(["--home", str(tmp_path), "servers", "--json", "--bogus"])
    captured = capsys.readouterr()
    assert code == 2
    assert json.loads(captured.out)["error"]["type"] == "Usage"
    assert captured.err.startswith("albedo-mcp: unrecognized arguments: --bogus")
