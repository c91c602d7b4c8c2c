"""wire/headers.py: values a server gave that we send back in HTTP headers."""

from __future__ import annotations

import pytest

from albedo_actors.wire.headers import InvalidHeaderValue, field_value_problem, last_event_id, session_id


@pytest.mark.parametrize("value", ["abc", "Bearer x.y-z", "a\tb", "é", b"\xe6\xb5\x81", "~!#", ""])
def test_a_field_value_of_visible_text_obs_text_and_inner_tabs_can_be_sent(value):
    assert field_value_problem(value) is None


@pytest.mark.parametrize("value,why", [
    ("流", "holds a character outside Latin-1"),
    ("\ud800", "holds a character outside Latin-1"),
    ("a\rb", "holds CR, LF or NUL"),
    ("a\nb", "holds CR, LF or NUL"),
    (b"a\x00b", "holds CR, LF or NUL"),
    ("a\x1bb", "holds a control character"),
    ("a\x7fb", "holds a control character"),
    (b"\x01", "holds a control character"),
])
def test_a_field_value_with_a_splitter_a_control_or_no_latin1_form_is_refused(value, why):
    assert field_value_problem(value) == why


def test_the_reason_never_quotes_the_value():
    assert "secret" not in field_value_problem("secret\r\nX: y")


@pytest.mark.parametrize("value", ["1868a90c-e3b6-4f5e-8d2c", "A!~", "x" * 200])
def test_a_visible_ascii_session_id_is_kept(value):
    assert session_id(value) == value


@pytest.mark.parametrize("value", ["", "a b", "a\tb", "s\xe9ss", "流", "a\x7f", "a\x00"])
def test_a_session_id_that_is_not_visible_ascii_is_refused(value):
    with pytest.raises(InvalidHeaderValue):
        session_id(value)


@pytest.mark.parametrize("value,sent", [("42", b"42"), ("流é-1", "流é-1".encode()), ("a b\tc", b"a b\tc")])
def test_an_event_id_goes_back_as_its_utf8_bytes(value, sent):
    assert last_event_id(value) == sent


@pytest.mark.parametrize("value,why", [
    ("a\x01", "holds a control character"),
    ("\x1b[2J", "holds a control character"),
    ("a\x7f", "holds a control character"),
    (" a", "starts or ends with a space or tab"),
    ("a\t", "starts or ends with a space or tab"),
    ("\udc80", "is not valid Unicode"),
])
def test_an_event_id_that_cannot_go_into_a_header_is_refused(value, why):
    with pytest.raises(InvalidHeaderValue, match=why):
        last_event_id(value)
