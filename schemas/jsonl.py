"""JSON Lines as samples arrive in files and uploads: one JSON object per line, blank lines skipped."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

from schemas.json_limits import SAMPLE_LIMITS, JsonLimitError, load_json


class JsonlError(ValueError):
    """A line that is not a JSON object; the message names the source and the line number."""

    def __init__(self, source: str, line: int | None, reason: str) -> None:
        self.source, self.line, self.reason = source, line, reason
        super().__init__(f"{source}, line {line}: {reason}" if line is not None else f"{source}: {reason}")


def parse_jsonl(data: bytes | str, source: str) -> list[dict[str, Any]]:
    """Every non-blank line as a JSON object; JsonlError at the first line that is not one (or for no lines)."""
    return list(iter_jsonl(data, source))


def iter_jsonl(data: bytes | str, source: str) -> Iterator[dict[str, Any]]:
    """`parse_jsonl`, one object at a time as it is read (an upload of 10^6 samples is never a list of them, nor a
    second copy of itself: bytes are read a line at a time, each line decoded alone)."""
    found = False
    for number, line in enumerate(_lines(data), 1):
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise JsonlError(source, number, f"not UTF-8 text (byte {exc.start} of the line)") from None
        if not line.strip():
            continue
        try:
            value = load_json(line, "the line", SAMPLE_LIMITS.depth)
        except json.JSONDecodeError as exc:
            raise JsonlError(source, number, f"not JSON ({exc.msg} at column {exc.colno})") from None
        except JsonLimitError as exc:
            raise JsonlError(source, number, str(exc)) from None
        if not isinstance(value, dict):
            raise JsonlError(source, number, f"a sample is a JSON object, got {_kind(value)}")
        found = True
        yield value
    if not found:
        raise JsonlError(source, None, "holds no samples" + (" (every line is blank)" if data else ""))


def _lines(data: bytes | str) -> Iterator[bytes | str]:
    """The lines of `data` without their ends; bytes sliced where they lie (`io.StringIO` would hold a copy of a
    whole upload at four bytes a character)."""
    if isinstance(data, str):
        yield from io.StringIO(data)
        return
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        yield data[start:end]
        start = end + 1


def _kind(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value), "a number")
