import hashlib
import tracemalloc

import pytest

from relay_shell.capture import BoundedCapture, decode_for_client, utf8_safe_head, utf8_safe_tail


def test_small_output_is_kept_whole_with_digest() -> None:
    capture = BoundedCapture(100)
    capture.feed(b"hello ")
    capture.feed(b"world")
    result = capture.result()
    assert result.text == "hello world"
    assert not result.truncated
    assert result.produced_bytes == 11
    assert result.sha256 == hashlib.sha256(b"hello world").hexdigest()


@pytest.mark.parametrize("chunk_size", [1, 7, 50, 64, 1000])
def test_long_output_keeps_head_and_tail(chunk_size: int) -> None:
    data = bytes(range(48, 58)) * 100  # "0123456789" * 100
    capture = BoundedCapture(64)
    for start in range(0, len(data), chunk_size):
        capture.feed(data[start : start + chunk_size])
    result = capture.result()
    assert result.truncated
    assert result.produced_bytes == 1000
    assert result.head_bytes == 32 and result.tail_bytes == 32
    head, tail = result.text.split("\n…\n")
    assert head == data[:32].decode()
    assert tail == data[-32:].decode()
    assert result.sha256 == hashlib.sha256(data).hexdigest()


def test_exactly_budget_is_not_truncated() -> None:
    capture = BoundedCapture(10)
    capture.feed(b"abcdefghij")
    assert capture.result().text == "abcdefghij"
    assert not capture.result().truncated


def test_never_splits_utf8_at_the_cuts() -> None:
    text = "é" * 500  # two bytes each
    capture = BoundedCapture(65)  # odd budget: head 33 bytes, tail 32 → a cut inside a character
    capture.feed(text.encode())
    result = capture.result()
    assert "\ufffd" not in result.text
    head, tail = result.text.split("\n…\n")
    assert set(head) == {"é"} and set(tail) == {"é"}


@pytest.mark.parametrize("character", ["é", "€", "😀"])
def test_utf8_safe_cuts_for_each_width(character: str) -> None:
    encoded = (character * 3).encode()
    for cut in range(len(encoded) + 1):
        assert "\ufffd" not in utf8_safe_head(encoded[:cut]).decode("utf-8", errors="replace")
        assert "\ufffd" not in utf8_safe_tail(encoded[cut:]).decode("utf-8", errors="replace")


def test_invalid_utf8_and_nul_are_made_visible() -> None:
    assert decode_for_client(b"a\xffb\x00c") == "a\ufffdb\u2400c"


def test_memory_is_independent_of_output_size() -> None:
    capture = BoundedCapture(4096)
    chunk = b"x" * 65536
    tracemalloc.start()
    for _ in range(200):  # 12.5 MiB through the capture
        capture.feed(chunk)
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert capture.result().produced_bytes == 200 * 65536
    assert peak < 1024 * 1024
