"""Help texts are written from tables (the feature dtypes', the exchange formats'): each table describes every value
of its vocabulary, once, in its order, so a value added to one is described or fails here."""

from __future__ import annotations

from typing import get_args

from schemas.exchange import FORMAT_FILES, ExchangeFormat, formats_help
from schemas.featureset import FEATURE_DTYPES, FeatureDtype


def test_every_feature_dtype_and_exchange_format_is_described() -> None:
    assert tuple(FEATURE_DTYPES) == get_args(FeatureDtype)
    assert list(FORMAT_FILES) == list(ExchangeFormat)
    assert all(fmt.value in formats_help() for fmt in ExchangeFormat)
