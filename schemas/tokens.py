"""Token ranges as the API writes them: `a:b`, half-open, either end optional."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TokenRange:
    start: int | None
    stop: int | None

    def resolve(self, length: int) -> tuple[int, int]:
        """Concrete [start, stop) within a sequence of `length` tokens, clipped to it as Python slicing clips;
        ValueError only when nothing is left."""
        start = 0 if self.start is None else min(self.start, length)
        stop = length if self.stop is None else min(self.stop, length)
        if start >= stop:
            raise ValueError(f"tokens={self} selects no token of an entry of {length} tokens")
        return start, stop

    @classmethod
    def of(cls, bounds: tuple[int | None, int | None] | TokenRange | str) -> TokenRange:
        """From the forms callers write: a TokenRange, a `(start, stop)` pair or an `a:b` string."""
        if isinstance(bounds, TokenRange):
            return bounds
        if isinstance(bounds, str):
            return parse_token_range(bounds)
        start, stop = bounds
        for bound in (start, stop):
            if bound is not None and (not isinstance(bound, int) or isinstance(bound, bool) or bound < 0):
                raise ValueError(f"token bounds are non-negative integers or None, got {bounds!r}")
        return cls(start, stop)

    def __str__(self) -> str:
        return f"{'' if self.start is None else self.start}:{'' if self.stop is None else self.stop}"


TOKENS_PATTERN = r"^ *[0-9]* *: *[0-9]* *$"  # what parse_token_range takes, for the API's schema


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
