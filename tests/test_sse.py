"""The SSE parser against the shapes real OpenAI-compatible servers send."""
from harness.serving.openai.sse import DONE, SSEParser


def parse(*chunks: bytes) -> list[str]:
    p = SSEParser()
    out = []
    for c in chunks:
        out += p.feed(c)
    return out + p.close()


def test_events_split_across_reads_and_several_in_one_read():
    a, b = b'data: {"x": 1}\n\n', b'data: {"x": 2}\n\n'
    stream = a + b + b"data: [DONE]\n\n"
    assert parse(stream) == ['{"x": 1}', '{"x": 2}', DONE]
    for cut in range(1, len(stream)):  # every split point, including mid-JSON and mid-delimiter
        assert parse(stream[:cut], stream[cut:]) == ['{"x": 1}', '{"x": 2}', DONE], cut


def test_crlf_comments_multiline_and_no_space():
    stream = b': keep-alive\r\n\r\ndata:{"a":1}\r\n\r\nevent: x\ndata: line1\ndata: line2\n\n'
    assert parse(stream) == ['{"a":1}', "line1\nline2"]


def test_a_stream_that_ends_without_a_blank_line_or_done():
    assert parse(b'data: {"last": true}') == ['{"last": true}']
    assert parse(b"") == []


def test_a_large_event():
    big = b"data: " + b"x" * 3_000_000 + b"\n\n"
    assert parse(big[:1000], big[1000:]) == ["x" * 3_000_000]
