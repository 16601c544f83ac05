"""Token ranges as the API writes them: `a:b`, half-open, either end optional."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TokenRange:
    start: int | None
    stop: int | None

    def resolve(self, length: int) -> tuple[int, int]:
        """Concrete [start, stop) within a sequence of `length` tokens; ValueError if empty or out of range."""
        start = 0 if self.start is None else self.start
        stop = length if self.stop is None else self.stop
        if not 0 <= start < stop <= length:
            raise ValueError(f"tokens={self} selects nothing valid in an entry of {length} tokens")
        return start, stop

    def __str__(self) -> str:
        return f"{'' if self.start is None else self.start}:{'' if self.stop is None else self.stop}"


def parse_token_range(text: str) -> TokenRange:
    parts = text.split(":")
    if len(parts) != 2:
        raise ValueError(f"tokens must look like 'a:b', got {text!r}")
    try:
        start, stop = (int(p) if p.strip() else None for p in parts)
    except ValueError:
        raise ValueError(f"tokens must look like 'a:b' with integers, got {text!r}") from None
    if (start is not None and start < 0) or (stop is not None and stop < 0):
        raise ValueError(f"tokens takes non-negative bounds, got {text!r}")
    return TokenRange(start, stop)
