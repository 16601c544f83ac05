from __future__ import annotations

from pathlib import Path

import torch
from transformers import Qwen3_5ForConditionalGeneration

from schemas.model_revision import model_revision
from service.model.devmodel import build_devmodel
from tests.conftest import load_model


def test_building_twice_gives_the_same_model_revision(tmp_path: Path, tiny_model_dir: Path) -> None:
    again = build_devmodel(tmp_path / "again")
    assert model_revision(again) == model_revision(tiny_model_dir)
    assert model_revision(again).startswith("sha256:")


def test_revision_changes_with_any_defining_file(tmp_path: Path) -> None:
    model = build_devmodel(tmp_path / "m")
    before = model_revision(model)
    (model / "generation_config.json").write_text('{"do_sample": false, "changed": 1}')
    assert model_revision(model) != before


def test_hub_snapshot_directory_uses_the_commit(tmp_path: Path) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = tmp_path / "models--Qwen--Qwen3.6-27B" / "snapshots" / commit
    build_devmodel(snapshot)
    assert model_revision(snapshot) == commit


def test_tiny_model_is_a_real_qwen3_5(tiny_model_dir: Path) -> None:
    loaded = load_model(tiny_model_dir, "sha256:" + "0" * 64, "cpu")
    assert type(loaded.model).__name__ == "Qwen3_5ForCausalLM"
    assert loaded.model.dtype == torch.bfloat16
    assert loaded.config.layer_types.count("full_attention") == 2 and loaded.num_layers == 8
    assert loaded.tokenizer.chat_template


def test_multimodal_checkpoint_loads_text_stack_with_identical_hidden_states(tiny_multimodal_dir: Path) -> None:
    loaded = load_model(tiny_multimodal_dir, "sha256:" + "0" * 64, "cpu")
    assert type(loaded.model).__name__ == "Qwen3_5ForCausalLM"  # the vision tower is not loaded
    assert not any("visual" in name for name, _ in loaded.model.named_parameters())
    full = Qwen3_5ForConditionalGeneration.from_pretrained(tiny_multimodal_dir, dtype=torch.bfloat16).eval()
    ids = torch.tensor([loaded.tokenizer("def lru_cache(capacity): pass")["input_ids"]])
    with torch.inference_mode():
        text_only = loaded.model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
        reference = full(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
    assert len(text_only) == len(reference) == 9
    for ours, theirs in zip(text_only, reference, strict=True):
        assert torch.equal(ours, theirs)
