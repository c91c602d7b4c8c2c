"""The client rules of SEP-2164 (tests/rules/rules.json; docs/rules.rst), through a real
ServerHandle against tests/servers/rules_stdio_server.py."""

from __future__ import annotations

import pytest

from albedo_actors.errors import RemoteError, ResourceNotFound, exit_code
from stdio_rules_kit import rules_config, started


@pytest.mark.rule("sep-2164-also-accept-32002-resource-found-error")
def test_error_32002_is_taken_as_resource_not_found_from_a_modern_server(tmp_path):
    """A resources/read refused with -32002 (the not-found code of 2025-11-25 and older) is
    raised as ResourceNotFound, naming the URI, from a 2026-07-28 server too (whose own
    not-found code is -32602); it is still a RemoteError and exits as one."""
    with started(rules_config(str(tmp_path / "log.jsonl")), str(tmp_path)) as handle:
        assert handle.read_resource("here://x", 10)["contents"][0]["text"] == "here"
        with pytest.raises(ResourceNotFound) as caught:
            handle.read_resource("missing://x", 10)
        assert handle.status()["era"] == "modern"
    error = caught.value
    assert isinstance(error, RemoteError) and error.code == -32002 and error.uri == "missing://x"
    assert "resource 'missing://x' not found" in str(error)
    assert exit_code(error) == exit_code(RemoteError("r", 1, "x"))
