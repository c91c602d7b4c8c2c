"""Modern HTTP request headers: value encoding, Mcp-Name, x-mcp-header rules, Mcp-Param-*."""

import base64
import random

import pytest

from albedo_actors.wire import headers
from albedo_actors.wire.headers import (
    InvalidToolHeaders,
    convert,
    encode_value,
    param_headers,
    request_headers,
    tool_param_headers,
)
from albedo_actors.wire.mcp import MODERN_VERSION


def decode(value):
    """What a server does with a header value (2026-07-28 streamable-http "Value encoding")."""
    if value.startswith("=?base64?") and value.endswith("?=") and len(value) >= 11:
        return base64.b64decode(value[9:-2], validate=True).decode("utf-8")
    return value


def tool(properties, **extra):
    return {"name": "t", "inputSchema": {"type": "object", "properties": properties, **extra}}


# --- encode_value ----------------------------------------------------------------


def test_spec_examples_are_base64_wrapped_with_standard_padded_alphabet():
    assert encode_value("Hello, 世界") == "=?base64?SGVsbG8sIOS4lueVjA==?="
    assert encode_value("München-1") == "=?base64?TcO8bmNoZW4tMQ==?="


@pytest.mark.parametrize("value", ["stock_level", "A-1001", "a b c", "file:///tmp/x?y=1&z=%20", "~!@#$%^&*()", "x", ""])
def test_visible_ascii_and_inner_spaces_go_out_plain(value):
    assert encode_value(value) == value


@pytest.mark.parametrize("value", [" lead", "trail ", " ", "  both  ", "\tlead", "trail\t"])
def test_leading_or_trailing_whitespace_is_wrapped(value):
    encoded = encode_value(value)
    assert encoded.startswith("=?base64?") and encoded.endswith("?=")
    assert decode(encoded) == value


def test_inner_tab_is_wrapped_so_no_control_character_is_sent():
    assert encode_value("a\tb") == "=?base64?" + base64.b64encode(b"a\tb").decode() + "?="


@pytest.mark.parametrize(
    "value", ["=?base64?SGk=?=", "=?base64??=", "=?base64?=", "=?base64?not base64!?=", "=?BASE64?SGk=?="]
)
def test_a_value_that_looks_like_the_sentinel_is_wrapped(value):
    encoded = encode_value(value)
    assert encoded != value
    assert encoded.startswith("=?base64?") and decode(encoded) == value


@pytest.mark.parametrize("value", ["=?base64?abc", "abc?=", "x=?base64?abc?="])
def test_only_a_full_sentinel_look_alike_is_wrapped(value):
    assert encode_value(value) == value


@pytest.mark.parametrize("value", ["a\r\nInjected: yes", "a\nb", "a\rb", "nul\x00", "del\x7f", "bell\x07", "é", "😀"])
def test_control_and_non_ascii_characters_are_wrapped(value):
    encoded = encode_value(value)
    assert encoded.startswith("=?base64?")
    assert decode(encoded) == value


def test_encoded_values_never_hold_control_characters_and_round_trip():
    rng = random.Random(20260728)
    alphabet = (
        [chr(c) for c in range(0x00, 0x80)]
        + ["\r\n", " ", "\t", "=?base64?", "?=", "é", "世", "😀", "\u2028", "\u0085", "\ufeff", "\U0010ffff"]
    )
    for _ in range(3000):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))
        encoded = encode_value(value)
        assert all(0x20 <= ord(ch) <= 0x7E for ch in encoded), repr(value)
        assert decode(encoded) == value
        if encoded != value:
            payload = encoded[9:-2]
            assert set(payload) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
            assert len(payload) % 4 == 0


def test_a_value_with_a_lone_surrogate_is_refused_with_a_value_error():
    with pytest.raises(ValueError, match="surrogate"):
        encode_value("a\ud800b")


# --- convert ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        ("text", "text"),
        ("", ""),
        (True, "true"),
        (False, "false"),
        (0, "0"),
        (-42, "-42"),
        (2**53 - 1, "9007199254740991"),
        (-(2**53 - 1), "-9007199254740991"),
    ],
)
def test_strings_booleans_and_safe_integers_convert(value, expected):
    assert convert(value) == expected


@pytest.mark.parametrize("value", [None, 1.5, float("nan"), float("inf"), [1], {"a": 1}, 2**53, -(2**53)])
def test_null_floats_containers_and_unsafe_integers_give_no_header(value):
    assert convert(value) is None


def test_an_integer_too_long_to_print_gives_no_header_instead_of_raising():
    assert convert(10**5000) is None


# --- request_headers -------------------------------------------------------------


def test_tools_call_carries_version_method_and_encoded_tool_name():
    got = request_headers("tools/call", {"name": "stock_level", "arguments": {}}, MODERN_VERSION)
    assert got == {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "stock_level"}


def test_prompts_get_names_the_prompt():
    got = request_headers("prompts/get", {"name": "résumé"}, MODERN_VERSION)
    assert got["Mcp-Name"] == encode_value("résumé")
    assert decode(got["Mcp-Name"]) == "résumé"


def test_resources_read_names_the_uri_not_a_name_param():
    got = request_headers("resources/read", {"uri": "file:///a b.txt", "name": "ignored"}, MODERN_VERSION)
    assert got["Mcp-Name"] == "file:///a b.txt"


@pytest.mark.parametrize("method", ["tools/list", "server/discover", "subscriptions/listen", "resources/list"])
def test_other_methods_carry_no_mcp_name(method):
    got = request_headers(method, {"name": "x", "uri": "y"}, MODERN_VERSION)
    assert got == {"MCP-Protocol-Version": MODERN_VERSION, "Mcp-Method": method}


@pytest.mark.parametrize("params", [None, {}, {"name": None}, {"name": 7}])
def test_a_missing_or_non_string_name_is_omitted(params):
    assert "Mcp-Name" not in request_headers("tools/call", params, MODERN_VERSION)


def test_method_and_version_values_are_case_sensitive_and_passed_as_given():
    got = request_headers("Tools/Call", None, "2026-07-28")
    assert got["Mcp-Method"] == "Tools/Call"
    assert "Mcp-Name" not in got  # the name rule matches the exact method only


@pytest.mark.parametrize(
    "method, version",
    [("tools/call\r\nX: y", MODERN_VERSION), ("", MODERN_VERSION), ("a b", MODERN_VERSION), ("tools/call", "2026-07-28\n")],
)
def test_a_method_or_version_that_is_not_a_plain_token_is_refused(method, version):
    with pytest.raises(ValueError):
        request_headers(method, None, version)


# --- tool_param_headers: valid ---------------------------------------------------


SPEC_TOOL = {
    "name": "stock_level",
    "inputSchema": {
        "type": "object",
        "properties": {
            "warehouse": {"type": "string", "x-mcp-header": "Warehouse"},
            "sku": {"type": "string"},
            "fresh": {"type": "boolean", "x-mcp-header": "Fresh"},
        },
        "required": ["warehouse", "sku"],
    },
}


def test_spec_example_tool_maps_header_names_to_property_paths():
    assert tool_param_headers(SPEC_TOOL) == {"Warehouse": ("warehouse",), "Fresh": ("fresh",)}


def test_a_tool_without_annotations_maps_nothing():
    assert tool_param_headers(tool({"a": {"type": "string"}, "b": {"type": "array", "items": {"type": "string"}}})) == {}
    assert tool_param_headers({"name": "t"}) == {}
    assert tool_param_headers({"name": "t", "inputSchema": {"type": "object"}}) == {}


def test_integer_and_nested_object_chain_annotations_are_valid():
    schema = tool(
        {
            "count": {"type": "integer", "x-mcp-header": "Count"},
            "target": {
                "type": "object",
                "properties": {"region": {"type": "object", "properties": {"id": {"type": "string", "x-mcp-header": "Region-Id"}}}},
            },
        }
    )
    assert tool_param_headers(schema) == {"Count": ("count",), "Region-Id": ("target", "region", "id")}


def test_every_tchar_is_accepted_and_the_name_keeps_its_case():
    name = "aZ09!#$%&'*+-.^_`|~"
    assert tool_param_headers(tool({"a": {"type": "string", "x-mcp-header": name}})) == {name: ("a",)}


def test_a_property_named_x_mcp_header_is_a_name_not_an_annotation():
    schema = tool(
        {"x-mcp-header": {"type": "object", "properties": {"x-mcp-header": {"type": "number"}}}},
        required=["x-mcp-header"],
        dependentRequired={"x-mcp-header": ["x-mcp-header"]},
    )
    assert tool_param_headers(schema) == {}


def test_annotations_elsewhere_in_the_tool_are_not_part_of_the_input_schema():
    got = dict(SPEC_TOOL, outputSchema={"type": "object", "properties": {"x": {"type": "number", "x-mcp-header": "X"}}})
    assert tool_param_headers(got) == {"Warehouse": ("warehouse",), "Fresh": ("fresh",)}


def test_other_schema_keywords_beside_a_valid_annotation_are_fine():
    prop = {"type": "string", "x-mcp-header": "Mode", "enum": ["a", "b"], "description": "d", "$ref": "#/$defs/M"}
    assert tool_param_headers(tool({"mode": prop}, **{"$defs": {"M": {"type": "string"}}})) == {"Mode": ("mode",)}


# --- tool_param_headers: invalid -------------------------------------------------


@pytest.mark.parametrize(
    "prop, reason",
    [
        ({"type": "number", "x-mcp-header": "N"}, "number"),
        ({"type": "object", "x-mcp-header": "N"}, "object"),
        ({"type": "array", "x-mcp-header": "N"}, "array"),
        ({"type": "null", "x-mcp-header": "N"}, "null"),
        ({"type": ["string", "null"], "x-mcp-header": "N"}, "list"),
        ({"type": ["integer"], "x-mcp-header": "N"}, "list"),
        ({"x-mcp-header": "N"}, "missing"),
        ({"enum": ["a"], "x-mcp-header": "N"}, "missing"),
        ({"type": "String", "x-mcp-header": "N"}, "String"),
    ],
)
def test_an_annotation_on_a_property_not_typed_string_integer_or_boolean_is_invalid(prop, reason):
    with pytest.raises(InvalidToolHeaders, match=reason):
        tool_param_headers(tool({"p": prop}))


@pytest.mark.parametrize(
    "name, reason",
    [
        ("", "empty"),
        ("Bad Name", "token"),
        ("a:b", "token"),
        ("a/b", "token"),
        ("(x)", "token"),
        ('a"b', "token"),
        ("Zürich", "token"),
        ("a\r\nInjected", "control"),
        ("tab\there", "control"),
        ("nul\x00", "control"),
        ("del\x7f", "control"),
        (5, "not a string"),
        (None, "not a string"),
        (True, "not a string"),
        (["A"], "not a string"),
    ],
)
def test_an_annotation_that_is_not_a_non_empty_token_is_invalid(name, reason):
    with pytest.raises(InvalidToolHeaders, match=reason):
        tool_param_headers(tool({"p": {"type": "string", "x-mcp-header": name}}))


def test_duplicate_names_are_invalid_case_insensitively():
    with pytest.raises(InvalidToolHeaders, match="repeats"):
        tool_param_headers(
            tool({"a": {"type": "string", "x-mcp-header": "Region"}, "b": {"type": "string", "x-mcp-header": "REGION"}})
        )
    with pytest.raises(InvalidToolHeaders, match="repeats"):
        tool_param_headers(
            tool(
                {
                    "a": {"type": "string", "x-mcp-header": "Same"},
                    "o": {"type": "object", "properties": {"b": {"type": "integer", "x-mcp-header": "same"}}},
                }
            )
        )


ANNOTATED = {"type": "string", "x-mcp-header": "Hidden"}


@pytest.mark.parametrize(
    "prop",
    [
        {"type": "array", "items": ANNOTATED},
        {"type": "array", "items": {"type": "object", "properties": {"x": ANNOTATED}}},
        {"type": "array", "prefixItems": [ANNOTATED]},
        {"type": "array", "contains": ANNOTATED},
        {"type": "object", "additionalProperties": ANNOTATED},
        {"type": "object", "patternProperties": {"^x": ANNOTATED}},
        {"type": "object", "unevaluatedProperties": ANNOTATED},
        {"type": "object", "propertyNames": ANNOTATED},
        {"anyOf": [ANNOTATED, {"type": "integer"}]},
        {"oneOf": [ANNOTATED]},
        {"allOf": [{"type": "object", "properties": {"x": ANNOTATED}}]},
        {"not": ANNOTATED},
        {"if": ANNOTATED},
        {"then": ANNOTATED},
        {"else": ANNOTATED},
        {"type": "object", "dependentSchemas": {"a": {"properties": {"x": ANNOTATED}}}},
        {"$defs": {"S": ANNOTATED}},
        {"definitions": {"S": ANNOTATED}},
        {"x-vendor-keyword": {"nested": ANNOTATED}},
        {"type": "string", "default": ANNOTATED},
        {"type": "string", "examples": [ANNOTATED]},
    ],
    ids=lambda p: next(iter(k for k in p if k != "type")),
)
def test_an_annotation_reached_through_anything_but_properties_is_invalid(prop):
    with pytest.raises(InvalidToolHeaders, match="chain of properties"):
        tool_param_headers(tool({"p": prop}))


def test_an_annotation_reached_only_through_ref_is_invalid():
    schema = tool({"p": {"$ref": "#/$defs/P"}}, **{"$defs": {"P": {"type": "string", "x-mcp-header": "P"}}})
    with pytest.raises(InvalidToolHeaders, match="'\\$defs'"):
        tool_param_headers(schema)


def test_an_annotation_at_the_root_level_keywords_is_invalid():
    with pytest.raises(InvalidToolHeaders, match="root"):
        tool_param_headers({"name": "t", "inputSchema": {"type": "object", "x-mcp-header": "Root"}})
    with pytest.raises(InvalidToolHeaders, match="chain of properties"):
        tool_param_headers({"name": "t", "inputSchema": {"type": "object", "anyOf": [{"properties": {"a": ANNOTATED}}]}})


def test_one_bad_annotation_invalidates_the_tool_even_beside_good_ones():
    schema = tool({"good": {"type": "string", "x-mcp-header": "Good"}, "bad": {"type": "number", "x-mcp-header": "Bad"}})
    with pytest.raises(InvalidToolHeaders):
        tool_param_headers(schema)


def test_reasons_stay_short_for_hostile_names():
    with pytest.raises(InvalidToolHeaders) as info:
        tool_param_headers(tool({"p" * 5000: {"type": "string", "x-mcp-header": "x y" * 5000}}))
    assert len(str(info.value)) < 200


def test_invalid_tool_headers_is_a_value_error():
    assert issubclass(InvalidToolHeaders, ValueError)


# --- tool_param_headers: hostile size --------------------------------------------


def test_a_very_deep_schema_is_refused_without_recursion():
    node = {"type": "string", "x-mcp-header": "Deep"}
    for _ in range(200_000):
        node = {"type": "object", "properties": {"a": node}}
    with pytest.raises(InvalidToolHeaders, match="schema too large to check"):
        tool_param_headers({"name": "t", "inputSchema": node})


def test_a_very_wide_schema_is_refused():
    schema = tool({f"p{i}": {"type": "string"} for i in range(headers.MAX_SCHEMA_NODES + 1)})
    with pytest.raises(InvalidToolHeaders, match="schema too large to check"):
        tool_param_headers(schema)


def test_deep_nesting_inside_other_keywords_is_refused_too():
    node = []
    for _ in range(100_000):
        node = [node]
    with pytest.raises(InvalidToolHeaders, match="schema too large"):
        tool_param_headers(tool({"p": {"type": "string", "default": node}}))


def test_a_large_but_bounded_schema_is_checked():
    schema = tool({f"p{i}": {"type": "integer", "enum": list(range(50))} for i in range(3000)})
    schema["inputSchema"]["properties"]["p2999"]["x-mcp-header"] = "Last"
    assert tool_param_headers(schema) == {"Last": ("p2999",)}


def test_paths_keep_document_order():
    names = [f"H{i}" for i in range(20)]
    schema = tool({f"p{i}": {"type": "string", "x-mcp-header": n} for i, n in enumerate(names)})
    assert list(tool_param_headers(schema)) == names


# --- param_headers ---------------------------------------------------------------


def test_spec_example_call_sends_only_supplied_arguments_encoded():
    paths = tool_param_headers(SPEC_TOOL)
    got = param_headers(paths, {"warehouse": "München-1", "sku": "A-1001"})
    assert got == {"Mcp-Param-Warehouse": "=?base64?TcO8bmNoZW4tMQ==?="}


@pytest.mark.parametrize(
    "value, expected",
    [("eu-west", "eu-west"), (True, "true"), (False, "false"), (42, "42"), (-7, "-7"), ("", ""), (" x", encode_value(" x"))],
)
def test_present_values_are_converted_and_encoded(value, expected):
    assert param_headers({"P": ("p",)}, {"p": value}) == {"Mcp-Param-P": expected}


@pytest.mark.parametrize("arguments", [None, {}, {"p": None}, {"other": "x"}])
def test_absent_or_null_arguments_give_no_header(arguments):
    assert param_headers({"P": ("p",)}, arguments) == {}


@pytest.mark.parametrize("value", [1.5, [1], {"a": 1}, 2**53, -(2**53)])
def test_values_without_a_conversion_give_no_header(value):
    assert param_headers({"P": ("p",)}, {"p": value}) == {}


def test_nested_paths_are_followed_and_broken_ones_omitted():
    paths = {"Region": ("target", "region"), "Id": ("target", "meta", "id")}
    assert param_headers(paths, {"target": {"region": "eu", "meta": {"id": 9}}}) == {
        "Mcp-Param-Region": "eu",
        "Mcp-Param-Id": "9",
    }
    assert param_headers(paths, {"target": "flat"}) == {}
    assert param_headers(paths, {"target": {"meta": None}}) == {}
    assert param_headers(paths, {"target": [{"region": "eu"}]}) == {}


def test_header_names_keep_the_annotation_spelling():
    assert param_headers({"tRaCe-Id": ("t",)}, {"t": "abc"}) == {"Mcp-Param-tRaCe-Id": "abc"}


def test_control_characters_in_arguments_never_reach_a_header_raw():
    got = param_headers({"P": ("p",)}, {"p": "a\r\nSet-Cookie: x=1"})
    assert "\r" not in got["Mcp-Param-P"] and "\n" not in got["Mcp-Param-P"]
    assert decode(got["Mcp-Param-P"]) == "a\r\nSet-Cookie: x=1"


def test_hand_made_paths_with_bad_or_case_duplicate_names_are_refused():
    with pytest.raises(InvalidToolHeaders):
        param_headers({"a b": ("p",)}, {"p": "x"})
    with pytest.raises(InvalidToolHeaders):
        param_headers({"Dup": ("a",), "DUP": ("b",)}, {"a": "1", "b": "2"})


@pytest.mark.parametrize("value, text", [(3.0, "3"), (-2.0, "-2"), (0.0, "0")])
def test_a_float_without_a_fractional_part_is_sent_as_an_integer(value, text):
    assert headers.convert(value) == text
