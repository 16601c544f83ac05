"""Imports you can trust, through real servers and the CLI: one service extracts twelve samples and exports them in
SpecForge's format; a second service, with the same model and a fresh store, imports six of them unchanged as a
foreign dump, then each of the other six alone after one kind of damage that keeps the file well-formed and finite.
Each damaged one is refused with its check named and nothing stored; the control is stored. And a dump of many files
all shifted by one token: where the model is loaded none of it is stored; where it is not, all of it is stored marked
unchecked (`hsstore health` lists it), and once an operator checks the imports against the model every one ends
suspect or found wrong."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from client import FeatureClient
from client.exchange import export, newest_versions
from hsstore.cli import app as cli
from schemas.exchange import ExchangeFormat
from schemas.featureset import FeatureSet
from service.main import create_app
from service.model.loader import LoadedModel
from service.settings import Settings
from tests.conftest import LiveServer, coding_prompts

FEATURES = FeatureSet(layers=[1, 3, 5, 6])
LAYER_IDS = "1,3,5,6"  # SpecForge's convention is hsstore's
Damage = Callable[[torch.Tensor], torch.Tensor]  # [T, L, H] -> the same shape


def _zeros(hidden: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(hidden)


def _layer_zeroed(hidden: torch.Tensor) -> torch.Tensor:
    out = hidden.clone()
    out[:, 2] = 0
    return out


def _one_row_everywhere(hidden: torch.Tensor) -> torch.Tensor:
    return hidden[5:6].expand_as(hidden).clone()  # one token's states copied to every position


def _layer_scaled(hidden: torch.Tensor) -> torch.Tensor:
    out = hidden.clone()
    out[:, 1] *= 1000
    return out


def _shifted(hidden: torch.Tensor) -> torch.Tensor:
    return torch.cat([hidden[1:], hidden[-1:]])  # every row one token late, as an off-by-one writer has them


DAMAGES: dict[str, tuple[Damage | None, str | None]] = {  # the damage and the check that must name it
    "all zeros": (_zeros, "constant over all"),
    "one layer zeroed": (_layer_zeroed, "constant over all"),
    "unchanged control": (None, None),
    "every row the same vector": (_one_row_everywhere, "repeat the row before"),
    "one layer scaled x1000": (_layer_scaled, "no residual stream jumps so"),
    "rows shifted one token": (_shifted, "spot check"),
}


def _files(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*.ckpt"))


def _damaged(source: Path, target: Path, damage: Damage | None) -> None:
    """A SpecForge file with its hidden states [1, T, L * H] damaged, still well-formed and finite."""
    record = torch.load(source, weights_only=True)
    hidden = record["hidden_states"]
    tokens, width = hidden.shape[1], hidden.shape[2]
    layers = len(FEATURES.layers)
    if damage is not None:
        changed = damage(hidden.view(tokens, layers, width // layers).float()).to(torch.bfloat16)
        record["hidden_states"] = changed.reshape(1, tokens, width).contiguous()
        assert bool(torch.isfinite(record["hidden_states"].float()).all())
    target.parent.mkdir(parents=True, exist_ok=True)
    torch.save(record, target)


def _import(url: str, directory: Path) -> tuple[int, str]:
    args = ["import", str(directory), "--format", "specforge", "--layer-ids", LAYER_IDS, "--url", url, "--json"]
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.output


@pytest.fixture
def exported(client: FeatureClient, tmp_path: Path) -> list[Path]:
    """Twelve samples extracted and exported by the first service, as SpecForge files."""
    prompts = coding_prompts()
    twelve = prompts + [{**p, "messages": [*p["messages"], {"role": "user", "content": "again"}]} for p in prompts[:2]]
    client.extract(twelve, featureset=FEATURES)
    export(client, newest_versions(client.entries(featureset=FEATURES.id)), ExchangeFormat.SPECFORGE, tmp_path / "out")
    files = _files(tmp_path / "out")
    assert len(files) == 12
    return files


def _second_service(tmp_path: Path, tiny_model_dir: Path, loaded: LoadedModel | None, name: str) -> LiveServer:
    """The same model on a fresh store: its weights loaded (`loaded`), or not (spec only, nothing preloaded)."""
    settings = Settings(data_dir=tmp_path / name, model_dir=tiny_model_dir, device="cpu", load_on_start=False)
    return LiveServer(create_app(settings, loaded))


@pytest.fixture
def second(tmp_path: Path, tiny_model_dir: Path, tiny_loaded: LoadedModel) -> Iterator[str]:
    with _second_service(tmp_path, tiny_model_dir, tiny_loaded, "second") as url:
        yield url


def test_each_kind_of_damage_is_refused_with_its_check_named_and_the_control_stored(
    exported: list[Path], second: str, tmp_path: Path
) -> None:
    normal = tmp_path / "normal"
    for file in exported[:6]:
        _damaged(file, normal / file.name, None)
    code, output = _import(second, normal)
    assert code == 0 and "6 imported" in output, output
    with FeatureClient(second) as client:
        assert len(list(client.entries())) == 6
    for (name, (damage, check)), file in zip(DAMAGES.items(), exported[6:], strict=True):
        one = tmp_path / name.replace(" ", "-")
        _damaged(file, one / file.name, damage)
        code, output = _import(second, one)
        if check is None:
            assert code == 0 and "1 imported" in output, (name, output)
        else:
            assert code != 0 and check in output, (name, output)
    with FeatureClient(second) as client:
        stored = list(client.entries())
    assert len(stored) == 7  # the six, and the control: nothing of a refused file
    health = CliRunner().invoke(cli, ["health", "--url", second])
    assert "0 imports to check against the model" in health.output, health.output


def _shifted_dump(exported: list[Path], directory: Path) -> Path:
    for file in exported:
        _damaged(file, directory / file.name, _shifted)
    return directory


def test_a_dump_shifted_throughout_is_refused_file_by_file_where_the_model_is_loaded(
    exported: list[Path], second: str, tmp_path: Path
) -> None:
    code, output = _import(second, _shifted_dump(exported, tmp_path / "shifted"))
    assert code != 0 and "spot check" in output, output
    with FeatureClient(second) as client:
        assert list(client.entries()) == []


def test_a_dump_shifted_throughout_without_the_weights_is_marked_and_found_out_later(
    exported: list[Path], tmp_path: Path, tiny_model_dir: Path
) -> None:
    """No weights loaded: each import says it was not checked, the whole run is stored marked unchecked (no file of
    it was ever vetted), health lists it; `hsstore audit --imports` loads the weights, finds the first wrong, and
    every other ends suspect (its run failed) or found wrong itself."""
    with _second_service(tmp_path, tiny_model_dir, None, "unloaded") as url:
        code, output = _import(url, _shifted_dump(exported, tmp_path / "shifted"))
        assert code == 0 and "12 imported" in output and "not spot-checked" in output, output
        with FeatureClient(url) as client:
            stored = list(client.entries())
            assert len(stored) == 12 and all(m.suspect and m.audit.status == "unchecked" for m in stored)
        health = CliRunner().invoke(cli, ["health", "--url", url])
        assert health.exit_code == 1 and "12 imports to check against the model" in health.output, health.output
        audit = CliRunner().invoke(cli, ["audit", "--imports", "--sample", "3", "--url", url])
        assert audit.exit_code == 1 and "DISAGREES" in audit.output, audit.output
        with FeatureClient(url) as client:
            after = list(client.entries())
        assert {m.audit.status for m in after} <= {"disagrees", "suspect"}, [m.audit for m in after]
        assert all(m.suspect for m in after)
        shutil.rmtree(tmp_path / "shifted")
