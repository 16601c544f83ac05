"""fp8 featuresets (float8 e4m3 + a float32 scale per token and layer) and the target's top-k next-token distribution,
end to end through a real server: what is stored, what readers get back, and the normalisation the client offers."""

from __future__ import annotations

import httpx
import pytest
import torch

from client import FeatureClient, TopK, kl_to_student, student_log_probs
from client.training.collate import pack_collate, pad_collate
from client.training.torch_data import to_sample
from compute.fp8 import FP8_MAX, dequantise, quantise
from schemas.featureset import FeatureSet
from service.model.loader import LoadedModel

SAMPLE = {"messages": [{"role": "user", "content": "Explain how a hash map resolves collisions."}]}
LAYERS = [1, 3, 7]


def full_logits(loaded: LoadedModel, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return loaded.model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()


def test_quantise_scales_each_row_by_a_power_of_two_and_dequantises_within_its_step() -> None:
    torch.manual_seed(0)
    hidden = (torch.randn(40, 3, 256) * torch.logspace(-3, 3, 40).view(40, 1, 1)).to(torch.bfloat16)
    hidden[7, 1] = 0  # a row of zeros keeps scale 1 and comes back as zeros
    quantised, scales = quantise(hidden)
    assert quantised.dtype == torch.float8_e4m3fn and scales.dtype == torch.float32 and scales.shape == (40, 3)
    assert scales[7, 1] == 1 and not dequantise(quantised, scales)[7, 1].any()
    mantissa, _ = torch.frexp(scales)
    assert bool((mantissa == 0.5).all())  # powers of two: scaling is exact, only the cast rounds
    # the smallest such power: each row's absmax lands in the top binade below e4m3's largest finite value
    scaled_max = hidden.float().abs().amax(dim=-1)[scales != 1] / scales[scales != 1]
    assert bool((scaled_max <= FP8_MAX).all()) and bool((scaled_max > FP8_MAX / 2).all())
    back = dequantise(quantised, scales, torch.float32)
    # e4m3 keeps 3 mantissa bits: relative error at most 2^-4 of each value (subnormals: half their step, 2^-10)
    error = (back - hidden.float()).abs()
    assert bool((error <= hidden.float().abs() * 2**-4 + scales.unsqueeze(-1) * 2**-10).all())


def test_an_fp8_featureset_stores_one_byte_per_value_and_reads_back_as_bfloat16(
    client: FeatureClient, tiny_loaded: LoadedModel
) -> None:
    bf16, fp8 = FeatureSet(layers=LAYERS), FeatureSet(layers=LAYERS, dtype="float8_e4m3fn")
    assert bf16.id != fp8.id  # the dtype is part of the featureset's identity
    client.extract([SAMPLE], featureset=bf16)
    client.extract([SAMPLE], featureset=fp8)
    exact, small = client.get(SAMPLE, featureset=bf16), client.get(SAMPLE, featureset=fp8)

    stored = small.manifest.tensors
    assert stored["hidden_states"].dtype == "float8_e4m3fn" and stored["hidden_scales"].dtype == "float32"
    tokens = small.manifest.num_tokens
    assert stored["hidden_states"].shape == [tokens, 3, 64] and stored["hidden_scales"].shape == [tokens, 3]
    # the values are the bf16 extraction's, quantised by the one convention in compute/fp8.py
    expected_q, expected_scales = quantise(exact.hidden_states)
    q, scales = small.fp8
    assert torch.equal(q.view(torch.uint8), expected_q.view(torch.uint8)) and torch.equal(scales, expected_scales)
    assert small.hidden_states.dtype == torch.bfloat16
    assert torch.equal(small.hidden_states, dequantise(expected_q, expected_scales))
    cosine = torch.nn.functional.cosine_similarity(small.hidden_states.float(), exact.hidden_states.float(), dim=-1)
    assert float(cosine.min()) > 0.99
    # the layer summary is that of the values the model computed, before quantisation
    assert small.manifest.layer_stats == exact.manifest.layer_stats
    with pytest.raises(ValueError, match="bfloat16"):
        _ = exact.fp8
    # compare reads fp8 entries as values: the same backend twice agrees exactly
    report = client.compare(SAMPLE, a="torch", b="torch", featureset=fp8)
    assert [row.layer for row in report.layers] == LAYERS
    assert all(row.cosine_min > 0.9999 and row.bitwise_equal_fraction == 1.0 for row in report.layers)


@pytest.mark.parametrize("wire_format", ["safetensors", "chunks"])
def test_a_layer_slice_of_an_fp8_entry_carries_the_scales_of_those_layers(
    live_url: str, client: FeatureClient, wire_format: str
) -> None:
    fp8 = FeatureSet(layers=LAYERS, dtype="float8_e4m3fn")
    client.extract([SAMPLE], featureset=fp8)
    whole = client.get(SAMPLE, featureset=fp8)
    with FeatureClient(live_url, wire_format=wire_format) as reader:  # type: ignore[arg-type]
        part = reader.get(SAMPLE, featureset=fp8, layers=[7, 1], tokens=(2, 9))
    q, scales = part.fp8
    assert q.shape == (7, 2, 64) and scales.shape == (7, 2)
    assert torch.equal(part.hidden_states, whole.hidden_states[2:9][:, [2, 0]])


def test_top_k_holds_the_targets_k_most_likely_tokens_with_full_vocabulary_log_probabilities(
    client: FeatureClient, tiny_loaded: LoadedModel
) -> None:
    featureset = FeatureSet(layers=[7], target_ids=True, top_k=8)
    client.extract([SAMPLE], featureset=featureset)
    features = client.get(SAMPLE, featureset=featureset)
    teacher = features.teacher
    assert isinstance(teacher, TopK)
    tokens = features.manifest.num_tokens
    assert (
        teacher.ids.shape == (tokens, 8) and teacher.logprobs.shape == (tokens, 8) and teacher.mass.shape == (tokens,)
    )

    reference = torch.log_softmax(full_logits(tiny_loaded, features.input_ids.tolist()), dim=-1)
    assert torch.equal(teacher.ids[:, 0].int(), features.target_ids)  # most likely first: the argmax
    assert torch.allclose(teacher.logprobs, reference.gather(-1, teacher.ids), atol=1e-5)
    assert bool((teacher.logprobs[:, :-1] >= teacher.logprobs[:, 1:]).all())
    # the retained mass is what the k hold of the full distribution, and no other token is more likely
    assert torch.allclose(teacher.mass, teacher.logprobs.exp().sum(-1))
    assert bool((teacher.mass <= 1 + 1e-6).all()) and bool((teacher.mass > 0).all())
    kth = teacher.logprobs[:, -1:]
    outside = reference.scatter(-1, teacher.ids, float("-inf"))
    assert bool((outside <= kth + 1e-6).all())


def test_the_renormalised_teacher_and_student_share_one_support() -> None:
    torch.manual_seed(1)
    teacher_logits = torch.randn(5, 50) * 3
    full = torch.log_softmax(teacher_logits, dim=-1)
    values, ids = full.topk(4, dim=-1)
    topk = TopK(ids, values, values.exp().sum(-1))
    renormalised = topk.probs()
    assert torch.allclose(renormalised.sum(-1), torch.ones(5))
    assert torch.allclose(topk.probs(renormalise=False).sum(-1), topk.mass)
    assert torch.allclose(renormalised, torch.softmax(teacher_logits.gather(-1, ids), dim=-1), atol=1e-6)

    # a student equal to the teacher is at zero KL under either normalisation, when both sides use the same one
    assert torch.allclose(kl_to_student(teacher_logits, topk), torch.zeros(5), atol=1e-6)
    assert torch.allclose(kl_to_student(teacher_logits, topk, renormalise=False), torch.zeros(5), atol=1e-6)
    # MaxText's bug: teacher over its top-k, student over the whole vocabulary -- never zero, even for the teacher
    mixed = (renormalised * (renormalised.log() - student_log_probs(teacher_logits, topk, renormalise=False))).sum(-1)
    assert bool((mixed > 1e-3).all())
    assert torch.allclose(mixed, -topk.mass.log(), atol=1e-5)  # exactly the mass the top-k leave out, in nats


def test_top_k_and_fp8_batch_through_both_collates(client: FeatureClient) -> None:
    featureset = FeatureSet(layers=[2, 5], dtype="float8_e4m3fn", top_k=4)
    samples = [SAMPLE, {"text": "Short one."}]
    client.extract(samples, featureset=featureset)
    rows = [to_sample(client.get(s, featureset=featureset)) for s in samples]
    lengths = [r["input_ids"].shape[0] for r in rows]
    padded = pad_collate(rows)
    assert padded["hidden_states"].dtype == torch.bfloat16
    assert padded["topk_ids"].shape == (2, max(lengths), 4) and padded["topk_ids"].dtype == torch.long
    assert padded["topk_logprobs"].dtype == torch.float32 and padded["topk_mass"].shape == (2, max(lengths))
    packed = pack_collate(rows)
    assert packed["topk_logprobs"].shape == (sum(lengths), 4)
    assert torch.equal(packed["topk_mass"][: lengths[0]], rows[0]["topk_mass"])


def test_top_k_beyond_the_vocabulary_or_its_bound_and_unknown_dtypes_are_refused(http: httpx.Client) -> None:
    with pytest.raises(ValueError, match="vocabulary of 16"):
        FeatureSet(layers=[1], top_k=64).check_against(8, vocab_size=16)
    for featureset in ({"layers": [1], "top_k": 5000}, {"layers": [1], "top_k": 0}, {"layers": [1], "dtype": "int8"}):
        response = http.post("/v1/extract", json={"samples": [SAMPLE], "featureset": featureset})
        assert 400 <= response.status_code < 500 and response.json()["error"]["code"], featureset


def test_the_cli_and_jsonl_jobs_take_the_whole_featureset(live_url: str, client: FeatureClient, tmp_path) -> None:
    from typer.testing import CliRunner

    from hsstore.cli import app as cli

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"text": "def g(x): return x"}\n')
    wanted = FeatureSet(layers=[1, 3], dtype="float8_e4m3fn", target_ids=True, top_k=8)
    options = ["--layers", "3,1", "--dtype", "float8_e4m3fn", "--target-ids", "--top-k", "8"]
    result = CliRunner().invoke(cli, ["extract", str(prompts), "--url", live_url, "--json", *options])
    assert result.exit_code == 0, result.output
    assert f'"featureset": "{wanted.id}"' in result.output
    features = client.get({"text": "def g(x): return x"}, featureset=wanted)
    assert features.teacher is not None and features.fp8[0].dtype == torch.float8_e4m3fn

    refused = CliRunner().invoke(cli, ["extract", str(prompts), "--url", live_url, "--top-k", "8"])
    assert refused.exit_code != 0 and "give its --layers too" in refused.output

    job = client.submit_job(jsonl=prompts.read_bytes(), featureset=wanted)
    assert job.featureset_id == wanted.id
