"""The body formats' table: what a client lists in Accept, what the service picks from it, and how a response or a
batch frame names its format."""

from __future__ import annotations

import pytest

from schemas.http import (
    BODY_FORMATS,
    BY_FRAME_KIND,
    ERROR_FRAME,
    FALLBACK,
    BodyFormat,
    accept_header,
    accepted,
    format_of,
)

CHUNKS = BODY_FORMATS[BodyFormat.CHUNKS].media_type
SAFETENSORS = BODY_FORMATS[BodyFormat.SAFETENSORS].media_type


def test_every_format_has_its_own_media_type_and_frame_kind() -> None:
    specs = list(BODY_FORMATS.values())
    assert len({s.media_type for s in specs}) == len({s.frame_kind for s in specs}) == len(BodyFormat)
    assert ERROR_FRAME not in BY_FRAME_KIND and all(BY_FRAME_KIND[s.frame_kind] is s for s in specs)


@pytest.mark.parametrize(
    ("accept", "formats"),
    [
        (None, [FALLBACK]),
        ("*/*", [FALLBACK]),
        (CHUNKS, [BodyFormat.CHUNKS, FALLBACK]),
        (f"{CHUNKS}, {SAFETENSORS}", [BodyFormat.CHUNKS, FALLBACK]),
        (f"{SAFETENSORS};q=1, {CHUNKS};q=0.5", [BodyFormat.SAFETENSORS, BodyFormat.CHUNKS]),
        ("text/html, application/x-unknown", [FALLBACK]),
    ],
)
def test_the_service_offers_what_the_client_lists_in_its_order_then_safetensors(
    accept: str | None, formats: list[BodyFormat]
) -> None:
    assert accepted(accept) == formats


@pytest.mark.parametrize("preferred", list(BodyFormat))
def test_a_clients_accept_header_reads_back_as_its_preference_then_the_fallback(preferred: BodyFormat) -> None:
    assert accepted(accept_header(preferred)) == list(dict.fromkeys([preferred, FALLBACK]))


def test_a_response_names_its_format_by_content_type() -> None:
    assert format_of(f"{CHUNKS}; charset=binary") == BodyFormat.CHUNKS
    assert format_of(SAFETENSORS) == format_of(None) == format_of("text/plain") == FALLBACK
