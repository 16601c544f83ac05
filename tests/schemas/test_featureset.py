from __future__ import annotations

import hashlib
import json

import pytest
from pydantic import ValidationError

from schemas.featureset import FeatureSet, build_target_layer_ids, parse_layers
from schemas.resolution import nearest_holding


def test_default_layers_are_dflash() -> None:
    assert build_target_layer_ids(64, 5) == [1, 16, 31, 46, 61]
    assert FeatureSet.default_for(64).layers == [1, 16, 31, 46, 61]
    assert build_target_layer_ids(64, 1) == [32]


def test_featureset_id_is_16_hex_of_canonical_json() -> None:
    fs = FeatureSet(layers=[1, 16, 31, 46, 61])
    canonical = json.dumps({"layers": [1, 16, 31, 46, 61], "dtype": "bfloat16"}, sort_keys=True, separators=(",", ":"))
    assert fs.id == hashlib.sha256(canonical.encode()).hexdigest()[:16]
    assert FeatureSet(layers=[1, 16, 31, 46, 61], target_ids=True).id != fs.id


@pytest.mark.parametrize("layers", [[], [-1], ["penultimate"], [1.5], ["1"], [True]])
def test_bad_layer_lists_are_refused(layers: list) -> None:
    with pytest.raises(ValidationError):
        FeatureSet(layers=layers)


@pytest.mark.parametrize(
    "layers", [[16, 1, "embed"], ["final_norm", 16, "embed", 1], [1, 16, 1], ["embed", 1, 16, "final_norm"]]
)
def test_layers_in_any_order_are_normalised(layers: list) -> None:
    """embed first, ascending indices, final_norm last, each once: one set of layers, one featureset id."""
    fs = FeatureSet(layers=layers)
    expected = [layer for layer in ("embed", 1, 16, "final_norm") if layer in layers]
    assert fs.layers == expected
    assert fs.id == FeatureSet(layers=expected).id


def test_layer_lists_parse_from_text() -> None:
    assert parse_layers("16, embed,1") == [16, "embed", 1]  # the order given: a read's selection keeps it
    with pytest.raises(ValueError, match="neither an integer"):
        parse_layers("1,,2")
    with pytest.raises(ValueError, match="empty"):
        parse_layers(" ")


def test_layer_range_is_checked_against_the_model() -> None:
    FeatureSet(layers=["embed", 0, 7, "final_norm"]).check_against(8)
    with pytest.raises(ValueError, match="out of range"):
        FeatureSet(layers=[8]).check_against(8)


def test_a_featureset_holds_another_of_its_dtype_with_fewer_layers_and_no_more_asked() -> None:
    union = FeatureSet(layers=["embed", 1, 2, 5], target_ids=True)
    assert union.holds(FeatureSet(layers=[1, 5])) and union.holds(FeatureSet(layers=[2], target_ids=True))
    assert not union.holds(FeatureSet(layers=[1, 3]))
    assert not union.holds(FeatureSet(layers=[1], dtype="float8_e4m3fn"))
    assert not union.holds(FeatureSet(layers=[1], top_k=4))
    assert not FeatureSet(layers=[1], top_k=8).holds(FeatureSet(layers=[1], top_k=4))  # its mass is over 8


def test_the_nearest_holding_featureset_is_itself_then_the_fewest_layers_then_the_fewest_extras() -> None:
    wanted = FeatureSet(layers=[1, 5])
    wide, narrow = FeatureSet(layers=[1, 2, 5, 6]), FeatureSet(layers=[1, 5, 6])
    extra = FeatureSet(layers=[1, 5, 7], top_k=4)
    assert nearest_holding([wide, narrow, extra], wanted) == narrow
    assert nearest_holding([wide, narrow, wanted], wanted) == wanted
    assert nearest_holding([extra, wide], wanted) == extra
    assert nearest_holding([FeatureSet(layers=[2])], wanted) is None
