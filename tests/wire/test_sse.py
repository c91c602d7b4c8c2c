"""Server-sent events: the bounded incremental parser against the standard's rules.

The reference parser below is written from the WHATWG HTML "Server-sent events"
parsing rules as literally as possible (decode the whole stream, walk it character by
character, then interpret line by line) and shares no code with the parser under test.
"""

from __future__ import annotations

import random
import tracemalloc

import pytest
import sseclient

from albedo_actors.wire.jsonrpc import MAX_MESSAGE_BYTES
from albedo_actors.wire.sse import FIELD_ROOM, MAX_RETRY_MS, SseEvent, SseParser, SseTooLarge

BOM = b"\xef\xbb\xbf"


# --- reference parser ------------------------------------------------------------------


def reference(stream: bytes, max_retry_ms: int = MAX_RETRY_MS) -> tuple[list[SseEvent], str | None, int | None]:
    """Events, last event ID string and reconnection time, straight from the standard."""
    # "UTF-8 decode": replacement for invalid sequences, one leading BOM removed.
    text = stream.decode("utf-8", "replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    # Lines end with CRLF, a lone LF or a lone CR; what follows the last line ending is
    # not a line ("any pending data must be discarded").
    lines = []
    current = ""
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\r":
            lines.append(current)
            current = ""
            if i + 1 < len(text) and text[i + 1] == "\n":
                i += 1
        elif c == "\n":
            lines.append(current)
            current = ""
        else:
            current += c
        i += 1

    data_buffer = ""
    event_type_buffer = ""
    last_event_id_buffer = None  # the standard starts with ""; None = never set
    last_event_id_string = None
    reconnection_time = None
    events = []
    for line in lines:
        if line == "":
            # dispatch the event
            last_event_id_string = last_event_id_buffer
            if data_buffer == "":
                data_buffer = ""
                event_type_buffer = ""
                continue
            if data_buffer.endswith("\n"):
                data_buffer = data_buffer[:-1]
            events.append(
                SseEvent(
                    event=event_type_buffer if event_type_buffer != "" else "message",
                    data=data_buffer,
                    id=last_event_id_string,
                    retry=reconnection_time,
                )
            )
            data_buffer = ""
            event_type_buffer = ""
            continue
        if line.startswith(":"):
            continue
        if ":" in line:
            field = line[: line.index(":")]
            value = line[line.index(":") + 1 :]
            if value.startswith(" "):
                value = value[1:]
        else:
            field = line
            value = ""
        if field == "event":
            event_type_buffer = value
        elif field == "data":
            data_buffer = data_buffer + value + "\n"
        elif field == "id":
            if "\x00" not in value:
                last_event_id_buffer = value
        elif field == "retry":
            if value != "" and all(c in "0123456789" for c in value):
                reconnection_time = min(int(value), max_retry_ms)  # clamping is ours
        # any other field is ignored
    return events, last_event_id_string, reconnection_time


def parse(chunks, **kwargs) -> tuple[list[SseEvent], str | None, int | None]:
    parser = SseParser(**kwargs)
    events = []
    for chunk in chunks:
        events += parser.feed(chunk)
    parser.close()
    return events, parser.last_event_id, parser.retry_ms


def sized(stream: bytes, size: int) -> list[bytes]:
    return [stream[i : i + size] for i in range(0, len(stream), size)]


def random_split(stream: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(len(stream) + 1), min(len(stream) + 1, rng.randint(0, 12))))
    bounds = [0, *cuts, len(stream)]
    return [stream[a:b] for a, b in zip(bounds, bounds[1:])]  # includes empty chunks


# --- generator of streams ----------------------------------------------------------------

VALUES = [
    b"",
    b"x",
    b" leading space kept after the first",
    b"a:b:c",
    b"caf\xc3\xa9 \xe2\x9c\x93",
    b"\xff\xfe invalid",
    b"cut \xe2\x82",
    b"nul \x00 inside",
    b"\xef\xbb\xbf bom inside",
    b"vt \x0b ff \x0c fs \x1c nel \xc2\x85 ls \xe2\x80\xa8",
    b"  two spaces",
    b"\t tab",
]
LINES = [
    b"",
    b"",
    b"",
    b":",
    b": keep-alive",
    b":comment: with colon",
    b"data",
    b"data:",
    b"event",
    b"event:",
    b"id",
    b"id:",
    b"retry",
    b"retry:",
    b"retry: 0",
    b"retry: 1500",
    b"retry:250",
    b"retry: 000000000000000000000042",
    b"retry: 99999999999999999999999999999",
    b"retry: -1",
    b"retry: 1.5",
    b"retry: 1e3",
    b"retry:  7",
    b"retry: 7 ",
    b"retry: \xd9\xa3",  # ARABIC-INDIC DIGIT THREE
    b"retry: \xc2\xb2",  # SUPERSCRIPT TWO
    b"DATA: upper case",
    b" data: leading space in name",
    b"data : space before colon",
    b"unknown: field",
    b"\xef\xbb\xbfdata: bom in name",
]
FIELDS = [b"data", b"data", b"data", b"event", b"id", b"retry", b"x"]
ENDINGS = [b"\n", b"\r", b"\r\n"]


def random_line(rng: random.Random) -> bytes:
    if rng.random() < 0.5:
        return rng.choice(LINES)
    field = rng.choice(FIELDS)
    value = rng.choice(VALUES)
    if rng.random() < 0.3:
        value = bytes(rng.choice(b"ab:\x00 \xc3\xa9\xff") for _ in range(rng.randint(0, 8)))
    return field + rng.choice([b":", b": ", b":  "]) + value


def random_stream(rng: random.Random) -> bytes:
    out = bytearray(rng.choice([b"", b"", b"", BOM, BOM + BOM, BOM[:2], BOM[:1]]))
    mixed = rng.random() < 0.5
    ending = rng.choice(ENDINGS)
    for _ in range(rng.randint(0, 40)):
        out += b"" if rng.random() < 0.25 else random_line(rng)  # empty lines dispatch
        out += rng.choice(ENDINGS) if mixed else ending
    end = rng.random()
    if end < 0.4:
        out += rng.choice(ENDINGS)  # close the last block
    elif end < 0.6:
        out += random_line(rng)  # an unterminated last line
    elif end < 0.8 and out:
        del out[rng.randrange(len(out)) :]  # cut anywhere: mid-line, mid-CRLF, mid-character
    return bytes(out)


STREAMS = [random_stream(random.Random(seed)) for seed in range(400)]


# --- comparison with the reference ----------------------------------------------------------


@pytest.mark.parametrize("seed", range(len(STREAMS)))
def test_matches_the_reference_whole_split_and_byte_by_byte(seed):
    stream = STREAMS[seed]
    expected = reference(stream)
    rng = random.Random(10_000 + seed)
    assert parse([stream]) == expected
    assert parse(random_split(stream, rng)) == expected
    assert parse(random_split(stream, rng)) == expected
    assert parse(sized(stream, 1)) == expected


def test_the_generator_reaches_the_interesting_cases():
    results = [reference(stream) for stream in STREAMS]
    events = [event for found, _, _ in results for event in found]
    assert len(events) > 500
    assert any(event.id is not None for event in events)
    assert any(event.id == "" for event in events)
    assert any(event.event != "message" for event in events)
    assert any("\n" in event.data for event in events)
    assert any(event.data == "" for event in events)
    assert any("\ufffd" in event.data for event in events)
    assert {retry for _, _, retry in results} >= {None, 0, 42, 250, 1500, MAX_RETRY_MS}
    assert any(stream.startswith(BOM) for stream in STREAMS)
    assert any(b"\r\n" in stream and b"\n\r" in stream for stream in STREAMS)


@pytest.mark.parametrize("seed", range(0, 400, 20))
def test_every_chunk_size_gives_the_events_of_the_whole_stream(seed):
    stream = STREAMS[seed] + b"\r\n\r\ndata: after\r\rid: 9\r\n\r\n"
    whole = parse([stream])
    assert whole == reference(stream)
    for size in range(1, len(stream) + 2):
        assert parse(sized(stream, size)) == whole, size


# --- the standard's own examples ------------------------------------------------------------------


def test_standard_example_with_comment_and_ids():
    stream = b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n"
    events, last_id, _ = parse([stream])
    assert events == [
        SseEvent("message", "first event", id="1"),
        SseEvent("message", "second event", id=""),
        SseEvent("message", " third event", id=""),
    ]
    assert last_id == ""


def test_standard_example_with_empty_data_and_an_unfinished_block():
    events, _, _ = parse([b"data\n\ndata\ndata\n\ndata:"])
    assert [event.data for event in events] == ["", "\n"]


def test_standard_example_multiline_and_space():
    events, _, _ = parse([b"data: YHOO\ndata: +2\ndata: 10\n\ndata:test\n\ndata: test\n\n"])
    assert [event.data for event in events] == ["YHOO\n+2\n10", "test", "test"]


# --- framing: line endings, BOM, decoding --------------------------------------------------------


@pytest.mark.parametrize(
    "stream",
    [
        b"data: a\ndata: b\n\nevent: e\ndata: c\n\n",
        b"data: a\rdata: b\r\revent: e\rdata: c\r\r",
        b"data: a\r\ndata: b\r\n\r\nevent: e\r\ndata: c\r\n\r\n",
        b"data: a\r\ndata: b\n\revent: e\ndata: c\r\r\n",
        b"data: a\rdata: b\n\r\nevent: e\r\ndata: c\n\r",
    ],
)
def test_line_endings_and_their_mixtures(stream):
    expected = [SseEvent("message", "a\nb"), SseEvent("e", "c")]
    for size in range(1, len(stream) + 1):
        assert parse(sized(stream, size))[0] == expected


def test_cr_at_the_end_of_a_chunk_and_lf_at_the_start_of_the_next_are_one_line_ending():
    parser = SseParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\n") == []  # not an empty line
    assert parser.feed(b"\r") == [SseEvent("message", "a")]  # CR alone ends the line at once
    assert parser.feed(b"\ndata: b\n") == []  # that LF belonged to the CR
    assert parser.feed(b"\n") == [SseEvent("message", "b")]


def test_a_cr_is_remembered_across_empty_chunks_only_until_the_next_byte():
    parser = SseParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"") == []
    assert parser.feed(b"\n") == []
    assert parser.feed(b"\n") == [SseEvent("message", "a")]


def test_one_leading_bom_is_stripped_even_when_split():
    stream = BOM + b"data: a\n\n"
    for size in range(1, len(stream) + 1):
        assert parse(sized(stream, size))[0] == [SseEvent("message", "a")]


def test_a_second_bom_or_a_later_one_is_not_stripped():
    assert parse([BOM + BOM + b"data: lost\n\ndata: b\n\n"])[0] == [SseEvent("message", "b")]
    events = parse([b"data: a\n\n" + BOM + b"data: lost\n\ndata: \xef\xbb\xbfkept\n\n"])[0]
    assert events == [SseEvent("message", "a"), SseEvent("message", "\ufeffkept")]


@pytest.mark.parametrize("start", [BOM[:1], BOM[:2], b"\xef\xbb\xbe"])
def test_a_partial_bom_is_not_a_bom(start):
    assert parse([start, b"data: a\n\ndata: b\n\n"])[0] == [SseEvent("message", "b")]
    assert parse([start])[0] == []


def test_invalid_utf8_is_replaced_and_split_characters_are_joined():
    stream = b"event: \xff\nid: \xc3\ndata: caf\xc3\xa9 \xe2\x82\n\n"
    expected = [SseEvent("\ufffd", "caf\u00e9 \ufffd", id="\ufffd")]
    for size in range(1, len(stream) + 1):
        assert parse(sized(stream, size))[0] == expected


def test_only_cr_and_lf_end_lines():
    data = "vt\x0b ff\x0c fs\x1c gs\x1d rs\x1e nel\x85 ls\u2028 ps\u2029"
    assert parse([b"data: " + data.encode() + b"\n\n"])[0] == [SseEvent("message", data)]


# --- fields ----------------------------------------------------------------------------------


def test_comments_and_keep_alives_dispatch_nothing():
    stream = b": hello\n\n:\n\ndata: a\n: inside an event\ndata: b\n\n: ping\n\n: ping\n\n"
    assert parse([stream])[0] == [SseEvent("message", "a\nb")]


def test_field_name_and_value():
    stream = (
        b"data:no space\n"
        b"data: one space removed\n"
        b"data:  only one space removed\n"
        b"data\n"
        b"data:\n"
        b"data: a:b\n"
        b"DATA: other field\n"
        b" data: other field\n"
        b"data : other field\n"
        b"\n"
    )
    events = parse([stream])[0]
    assert events == [SseEvent("message", "no space\none space removed\n only one space removed\n\n\na:b")]


def test_event_type():
    stream = b"event: a\ndata: 1\n\ndata: 2\n\nevent: b\nevent:\ndata: 3\n\nevent: c\n\ndata: 4\n\n"
    assert [(e.event, e.data) for e in parse([stream])[0]] == [("a", "1"), ("message", "2"), ("message", "3"), ("message", "4")]


def test_id_carries_to_later_events_and_can_be_reset():
    stream = b"data: a\n\nid: 1\ndata: b\n\ndata: c\n\nid: 2\n\ndata: d\n\nid\ndata: e\n\ndata: f\nid: 3\n\n"
    events, last_id, _ = parse([stream])
    assert [(e.data, e.id) for e in events] == [("a", None), ("b", "1"), ("c", "1"), ("d", "2"), ("e", ""), ("f", "3")]
    assert last_id == "3"


def test_id_containing_nul_is_ignored():
    events, last_id, _ = parse([b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\nid: \x00\n\n"])
    assert [e.id for e in events] == ["1", "1"]
    assert last_id == "1"


def test_event_with_only_an_id_is_not_dispatched_but_the_id_is_kept():
    parser = SseParser()
    assert parser.feed(b"id: 7\n\n") == []
    assert parser.last_event_id == "7"
    assert parser.feed(b"event: x\nid: 8\n\ndata: a\n\n") == [SseEvent("message", "a", id="8")]


@pytest.mark.parametrize(
    "line, retry",
    [
        (b"retry: 1500", 1500),
        (b"retry:1500", 1500),
        (b"retry: 0", 0),
        (b"retry: 0000000000000000000000000000000000000000000000000000007", 7),
        (b"retry: 30000", 30_000),
        (b"retry: 30001", MAX_RETRY_MS),
        (b"retry: 99999999999999999999999999999999999999", MAX_RETRY_MS),
        (b"retry: " + b"9" * 100_000, MAX_RETRY_MS),  # past int()'s 4300-digit limit
        (b"retry", None),
        (b"retry:", None),
        (b"retry: ", None),
        (b"retry: -1", None),
        (b"retry: +1", None),
        (b"retry: 1.5", None),
        (b"retry: 1e3", None),
        (b"retry: 0x10", None),
        (b"retry:  10", None),
        (b"retry: 10 ", None),
        (b"retry: 1_000", None),
        (b"retry: \xd9\xa3", None),
        (b"retry: \xc2\xb2", None),
        (b"retry: \xef\xbc\x91", None),  # FULLWIDTH DIGIT ONE
    ],
)
def test_retry_is_validated_and_clamped(line, retry):
    events, _, retry_ms = parse([line + b"\ndata: a\n\n"])
    assert retry_ms == retry
    assert events == [SseEvent("message", "a", retry=retry)]


def test_invalid_retry_keeps_the_previous_value_and_the_ceiling_is_configurable():
    parser = SseParser(max_retry_ms=100)
    parser.feed(b"retry: 50\n\n")
    assert parser.retry_ms == 50
    parser.feed(b"retry: soon\n\n")
    assert parser.retry_ms == 50
    parser.feed(b"retry: 101\n\n")
    assert parser.retry_ms == 100
    assert SseParser(max_retry_ms=0).feed(b"retry: 5\ndata\n\n") == [SseEvent("message", "", retry=0)]


def test_retry_takes_effect_when_its_line_is_complete():
    parser = SseParser()
    parser.feed(b"data: a\nretry: 10")
    assert parser.retry_ms is None
    parser.feed(b"\n")
    assert parser.retry_ms == 10
    parser.close()
    assert parser.retry_ms == 10


# --- end of stream -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tail",
    [b"data: cut", b"data: cut\n", b"data: cut\r\n", b"data: cut\ndata: more", b"id: 9\ndata: cut\n", b"id: 9\n", b"id: 9"],
)
def test_a_stream_cut_mid_event_drops_that_event_and_its_id(tail):
    parser = SseParser()
    events = parser.feed(b"id: 1\ndata: a\n\n" + tail)
    parser.close()
    assert events == [SseEvent("message", "a", id="1")]
    assert parser.last_event_id == "1"


def test_close_is_final_and_idempotent():
    parser = SseParser()
    assert parser.feed(b"") == []
    parser.close()
    parser.close()
    with pytest.raises(RuntimeError):
        parser.feed(b"data: a\n\n")


def test_limits_must_make_sense():
    with pytest.raises(ValueError):
        SseParser(max_event_bytes=0)
    with pytest.raises(ValueError):
        SseParser(max_retry_ms=-1)


# --- bounds ------------------------------------------------------------------------------------


def test_data_of_exactly_the_limit_is_accepted_one_byte_more_is_not():
    limit = 1000
    one_line = b"data: " + b"x" * limit + b"\n\n"
    assert parse([one_line], max_event_bytes=limit)[0] == [SseEvent("message", "x" * limit)]
    lines = b"data: " + b"x" * 499 + b"\ndata: " + b"y" * 500 + b"\n\n"  # 499 + LF + 500
    assert parse([lines], max_event_bytes=limit)[0] == [SseEvent("message", "x" * 499 + "\n" + "y" * 500)]
    with pytest.raises(SseTooLarge, match="of data"):
        parse([b"data: " + b"x" * (limit + 1) + b"\n\n"], max_event_bytes=limit)
    with pytest.raises(SseTooLarge, match="of data"):
        parse([b"data: " + b"x" * 500 + b"\ndata: " + b"y" * 500 + b"\n\n"], max_event_bytes=limit)


def test_many_small_data_lines_over_the_limit_raise():
    parser = SseParser(max_event_bytes=10_000)
    with pytest.raises(SseTooLarge, match="more than 10000 bytes of data"):
        for _ in range(10_000):
            parser.feed(b"data: " + b"z" * 99 + b"\n")
    with pytest.raises(RuntimeError):
        parser.feed(b"\n")


@pytest.mark.parametrize("chunk_size", [1, 7, 100, 4096, 1 << 20])
def test_an_endless_line_raises_once_past_the_limit(chunk_size):
    limit = 50_000
    parser = SseParser(max_event_bytes=limit)
    fed = 0
    with pytest.raises(SseTooLarge, match="line over the 50000 bytes limit"):
        parser.feed(b"data: ")
        while True:
            parser.feed(b"x" * chunk_size)
            fed += chunk_size
            assert fed <= limit + FIELD_ROOM + chunk_size
    assert fed > limit + FIELD_ROOM - 6 - chunk_size


@pytest.mark.parametrize("line", [b": " + b"c" * 70_000, b"event: " + b"e" * 70_000, b"id: " + b"i" * 70_000])
def test_any_long_line_raises_whole_or_split(line):
    for chunks in ([line + b"\n"], sized(line + b"\n", 999)):
        with pytest.raises(SseTooLarge):
            parse(chunks, max_event_bytes=50_000)


def test_memory_stays_bounded_on_an_endless_line_and_endless_data():
    limit = 1 << 20
    chunk = b"x" * 65536
    tracemalloc.start()
    try:
        parser = SseParser(max_event_bytes=limit)
        parser.feed(b"data: ")
        with pytest.raises(SseTooLarge):
            for _ in range(10_000):  # 640 MiB if it were all kept
                parser.feed(chunk)
        _, line_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        parser = SseParser(max_event_bytes=limit)
        with pytest.raises(SseTooLarge):
            for _ in range(10_000):
                parser.feed(b"data: " + chunk + b"\n")
        _, data_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert line_peak < 4 * limit
    assert data_peak < 4 * limit


# --- linear time (no timing asserted: the suite's timeout catches a quadratic parser) ---------


def test_a_16_mib_one_line_event_in_4_kib_chunks():
    stream = b"id: big\ndata: " + b"a" * MAX_MESSAGE_BYTES + b"\n\n"
    events = []
    parser = SseParser()
    for chunk in sized(stream, 4096):
        events += parser.feed(chunk)
    parser.close()
    assert len(events) == 1
    assert len(events[0].data) == MAX_MESSAGE_BYTES and events[0].id == "big"


def test_a_16_mib_event_of_short_data_lines_in_4_kib_chunks():
    line = b"data: " + b"b" * 57 + b"\n"  # 58 bytes of data per line with the joining LF
    count = MAX_MESSAGE_BYTES // 58
    stream = line * count + b"\n"
    events = []
    parser = SseParser()
    for chunk in sized(stream, 4096):
        events += parser.feed(chunk)
    assert len(events) == 1
    assert len(events[0].data) == count * 58 - 1


def test_200k_tiny_events():
    stream = b"".join(b"id: %d\nevent: t\ndata: %d\n\n" % (i, i) for i in range(200_000))
    events = []
    parser = SseParser()
    for chunk in sized(stream, 65536):
        events += parser.feed(chunk)
    parser.close()
    assert len(events) == 200_000
    assert events[-1] == SseEvent("t", "199999", id="199999")
    assert parser.last_event_id == "199999"


# --- sseclient-py --------------------------------------------------------------------------


def sseclient_py(chunks):
    return [(event.event, event.data) for event in sseclient.SSEClient(iter(chunks)).events()]


def test_field_semantics_agree_with_sseclient_py_where_it_is_correct():
    # Its correct domain: LF endings, valid UTF-8, no BOM, no id or retry (it neither
    # carries nor validates them), and a stream that ends with a complete block.
    rng = random.Random(7)
    lines = [b"", b"", b":", b": c", b"data", b"data:", b"data: a", b"data:b", b"data:  c", b"data: d:e", b"event: x", b"event:", b"event", b"other: y", b"caf\xc3\xa9: z"]
    compared = 0
    for _ in range(300):
        stream = b"".join(rng.choice(lines) + b"\n" for _ in range(rng.randint(0, 30))) + b"\n"
        theirs = sseclient_py([stream])
        ours = [(event.event, event.data) for event in parse([stream])[0]]
        assert ours == theirs, stream
        compared += len(ours)
    assert compared > 500


@pytest.mark.parametrize(
    "chunks, theirs, ours",
    [
        # A blank line written LF then CRLF (or LF then CR) is missed by its framing.
        ([b"data: a\n\r\ndata: b\n\n"], [("message", "a\nb")], [("message", "a"), ("message", "b")]),
        ([b"data: a\n\rdata: b\n\n"], [("message", "a\nb")], [("message", "a"), ("message", "b")]),
        # A block cut off by the end of the stream is delivered.
        ([b"data: a\n\ndata: cut"], [("message", "a"), ("message", "cut")], [("message", "a")]),
        # A leading BOM makes the first field unknown.
        ([BOM + b"data: a\n\n"], [], [("message", "a")]),
    ],
)
def test_sseclient_py_framing_defects(chunks, theirs, ours):
    """Pinned against the installed sseclient-py: if one starts failing, revisit wire/sse.py's docstring."""
    assert sseclient_py(chunks) == theirs
    assert [(event.event, event.data) for event in parse(chunks)[0]] == ours


def test_sseclient_py_field_defects():
    """Pinned against the installed sseclient-py: if one starts failing, revisit wire/sse.py's docstring."""
    stream = b"id: 1\ndata: a\n\ndata: b\n\nid: 2\n\ndata: c\n\nid: 3\x00\nretry: soon\ndata: d\n\n"
    theirs = [(e.data, e.id, e.retry) for e in sseclient.SSEClient(iter([stream])).events()]
    assert theirs == [("a", "1", None), ("b", None, None), ("c", None, None), ("d", "3\x00", "soon")]
    ours = [(e.data, e.id, e.retry) for e in parse([stream])[0]]
    assert ours == [("a", "1", None), ("b", "1", None), ("c", "2", None), ("d", "2", None)]
    with pytest.raises(UnicodeDecodeError):
        list(sseclient.SSEClient(iter([b"data: \xff\n\n"])).events())
    assert parse([b"data: \xff\n\n"])[0] == [SseEvent("message", "\ufffd")]
