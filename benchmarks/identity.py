"""Whether extracted features are the model's own forward of each sequence, and what each way of extracting costs, on
one GPU at the 27B shape (random weights), 5 DFlash layers, fla, in one process:

  identity    per length (1 to 20,000 tokens: multiples of 64 and not, both sides of 8,192 and of a pack's 16,384, and
              one sequence longer than a pack; all extracted together, so they share packs) and layer, the share of
              values equal to the model's own forward of the sequence alone (compute/reference.py: transformers'
              forward to the last stored layer), with layer 61's cosine minimum over tokens and largest difference
  long        each of `--long` (32,768, 65,536, 131,072) and the longest the card's memory plan holds, alone under the
              default policy: bit-equal where the card holds it, else the one line it is refused with
  orders      the same sequences extracted again in another order and other company (reversed, in two calls of
              alternate sequences: other packs, other offsets), bit for bit against the first extraction
  throughput  each policy's lean extraction (forwards and the copy to host memory; no hashing or writing) of the two
              length mixes of benchmarks/extract.py, the policies interleaved round by round
  profile     where one short-mix pack's GPU time goes under the default policy

Policies: own-rows packs (the default: every op whose bits can depend on its row count at each sequence's own rows),
an earlier release's packs (GEMMs and norms over the whole pack), one sequence per forward.

    python benchmarks/identity.py --out benchmarks/results/identity-h200.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.extract import MIXES, lengths_totalling, profile_pack, random_ids
from benchmarks.records import record_header
from compute.reference import reference_layers
from compute.tensors import to_torch
from schemas.backend import PINNED_ATTENTION, Backend
from schemas.batching import PackPolicy
from schemas.featureset import FeatureSet
from service.errors import TooLarge
from service.extraction.extractor import Extractor
from service.extraction.packing import plan_packs
from service.main import build_extractor
from service.model.encode import EncodedPrompt
from service.model.loader import LoadedModel
from service.model.synthetic import build_synthetic
from service.settings import Settings

LENGTHS = [1, 17, 64, 129, 200, 333, 700, 900, 1500, 1777, 2048, 3001, 4097, 8191, 8192, 8193, 16383, 16384, 20000]


def policies(pack_tokens: int) -> dict[str, PackPolicy | None]:
    return {
        "own-rows packs": PackPolicy(pack_tokens),
        "earlier packs": PackPolicy(pack_tokens, own_rows=False),
        "one per forward": None,
    }


def encoded(ids: list[int]) -> EncodedPrompt:
    return EncodedPrompt(prompt_ids=ids, completion_ids=None, completion_source=None, greedy_max_new_tokens=None)


def extracted(extractor: Extractor, items: list, featureset: FeatureSet, pack: PackPolicy | None) -> dict:
    done = extractor.extract_many(items, featureset, Backend.FLA, pack=pack)
    return {index: to_torch(next(t for t in p.wait().tensors if t.name == "hidden_states")) for index, p in done}


def plain(loaded: LoadedModel, ids: list[int], layers: list[int]) -> torch.Tensor:
    """The model's own forward of the sequence alone (compute/reference.py: the body to the last stored layer, no
    logits, so it fits beside the weights at every length extraction takes), full attention on the pinned kernel."""
    with loaded.kernels.running(Backend.FLA):
        return reference_layers(loaded.body, ids, layers, PINNED_ATTENTION)


def long_contexts(extractor: Extractor, featureset: FeatureSet, layers: list[int], lengths: list[int]) -> dict:
    """Each long sequence alone under the default policy (packs cut to this card's memory plan): bit-equal to the
    model's own forward where the card holds it, else the one line the service refuses it with."""
    vocab = int(extractor.loaded.config.vocab_size)
    plan = extractor.memory.known(Backend.FLA)
    longest = plan.longest_sequence(featureset) if plan is not None else None
    rows = []
    for n in sorted({*lengths, *([longest] if longest else [])}):
        ids = random_ids([n], vocab, seed=n)[0]
        torch.cuda.reset_peak_memory_stats()
        try:
            (hidden,) = extracted(extractor, [(encoded(ids), str(n))], featureset, extractor.pack_policy).values()
        except TooLarge as exc:
            rows.append({"tokens": n, "refused": exc.message})
            print(json.dumps(rows[-1]), flush=True)
            continue
        peak = torch.cuda.max_memory_allocated() / 1e9
        reference = plain(extractor.loaded, ids, layers)
        equal = (hidden.view(torch.int16) == reference.view(torch.int16)).float().mean(dim=(0, 2))
        rows.append(
            {
                "tokens": n,
                "equal_share_by_layer": {str(layer): float(e) for layer, e in zip(layers, equal, strict=True)},
                "bit_equal": bool((equal == 1).all()),
                "peak_allocated_gb": peak,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
        del hidden, reference
    taken = [row for row in rows if "refused" not in row]
    return {
        "longest_the_plan_holds": longest,
        "by_length": rows,
        "all_taken_bit_equal": all(row["bit_equal"] for row in taken),
        "longest_taken": max((row["tokens"] for row in taken), default=0),
    }


def layout(lengths: list[int], pack_tokens: int) -> list[list[tuple[int, int]]]:
    """Each pack's (length, start) pairs: where a call puts each sequence."""
    packs = plan_packs(lengths, PackPolicy(pack_tokens))
    return [[(lengths[s.index], s.start) for s in pack.segments] for pack in packs]


def orders(
    extractor: Extractor, featureset: FeatureSet, sequences: list[list[int]], first: dict, pack_tokens: int
) -> dict:
    """The sequences again, reversed and in two calls of alternate ones: other packs and offsets, the same bits."""
    reverse = list(reversed(range(len(sequences))))
    calls = [reverse[0::2], reverse[1::2]]
    again: dict[int, torch.Tensor] = {}
    for call in calls:
        items = [(encoded(sequences[i]), str(len(sequences[i]))) for i in call]
        for position, features in extracted(extractor, items, featureset, PackPolicy(pack_tokens)).items():
            again[call[position]] = features
    equal = {
        str(len(sequences[i])): bool(torch.equal(first[i].view(torch.int16), again[i].view(torch.int16)))
        for i in range(len(sequences))
    }
    return {
        "first_layout": layout([len(s) for s in sequences], pack_tokens),
        "second_layouts": [layout([len(sequences[i]) for i in call], pack_tokens) for call in calls],
        "bit_equal_by_length": equal,
        "all_bit_equal": all(equal.values()),
    }


def identity(extractor: Extractor, featureset: FeatureSet, layers: list[int], pack_tokens: int) -> dict:
    vocab = int(extractor.loaded.config.vocab_size)
    sequences = random_ids(LENGTHS, vocab, seed=7)
    items = [(encoded(ids), str(len(ids))) for ids in sequences]
    by_policy = {}
    for name, pack in policies(pack_tokens).items():
        try:
            by_policy[name] = extracted(extractor, items, featureset, pack)
        except TooLarge as exc:  # an earlier release's packs (whose rows are their bits) this card does not hold
            print(f"{name}: {exc.message}", flush=True)
    in_two_orders = orders(extractor, featureset, sequences, by_policy["own-rows packs"], pack_tokens)
    print(json.dumps({"all_bit_equal": in_two_orders["all_bit_equal"]}), flush=True)
    rows = []
    for index, ids in enumerate(sequences):
        reference = plain(extractor.loaded, ids, layers)
        row: dict = {"tokens": len(ids)}
        for name, features in by_policy.items():
            hidden = features[index]
            equal = (hidden.view(torch.int16) == reference.view(torch.int16)).float().mean(dim=(0, 2))
            last, last_ref = hidden[:, -1].float(), reference[:, -1].float()
            row[name] = {
                "equal_share_by_layer": {str(layer): float(e) for layer, e in zip(layers, equal, strict=True)},
                f"layer_{layers[-1]}_cosine_min": float(torch.nn.functional.cosine_similarity(last, last_ref).min()),
                f"layer_{layers[-1]}_max_abs_diff": float((last - last_ref).abs().max()),
            }
        rows.append(row)
        print(json.dumps(row), flush=True)
    exact = all(all(share == 1.0 for share in row["own-rows packs"]["equal_share_by_layer"].values()) for row in rows)
    return {"by_length": rows, "own_rows_exact_at_every_length": exact, "two_orders": in_two_orders}


def throughput(extractor: Extractor, featureset: FeatureSet, args: argparse.Namespace) -> dict:
    vocab = int(extractor.loaded.config.vocab_size)
    out: dict = {}
    mixes = {}
    for seed, (mix, (low, high)) in enumerate(MIXES.items()):
        lengths = lengths_totalling(getattr(args, f"{mix}_tokens"), low, high, seed=10 + seed)
        items = [(encoded(ids), "bench") for ids in random_ids(lengths, vocab, seed=20 + seed)]
        packs = plan_packs(lengths, PackPolicy(args.pack_tokens))
        mixes[mix] = items
        out[mix] = {
            "tokens": sum(lengths),
            "sequences": len(lengths),
            "packs": len(packs),
            "fill": sum(lengths) / sum(p.shape for p in packs),
            "rounds": {name: [] for name in policies(args.pack_tokens)},
        }
        for pack in policies(args.pack_tokens).values():  # kernels tuned and compiled untimed, once per shape kind
            extracted(extractor, items[: args.warmup_sequences], featureset, pack)
    for round_ in range(args.rounds):
        for mix, items in mixes.items():
            names = list(policies(args.pack_tokens).items())
            for name, pack in names if round_ % 2 == 0 else names[::-1]:
                torch.cuda.synchronize()
                start = time.perf_counter()
                for _, pending in extractor.extract_many(items, featureset, Backend.FLA, pack=pack):
                    pending.wait()
                torch.cuda.synchronize()
                tok_s = out[mix]["tokens"] / (time.perf_counter() - start)
                out[mix]["rounds"][name].append(tok_s)
                print(f"round {round_} {mix} {name}: {tok_s:.0f} tok/s", flush=True)
    for mix in mixes:
        best = {name: max(rounds) for name, rounds in out[mix]["rounds"].items()}
        out[mix]["best_tok_s"] = best
        out[mix]["own_rows_vs_earlier_packs"] = best["own-rows packs"] / best["earlier packs"]
        out[mix]["own_rows_vs_one_per_forward"] = best["own-rows packs"] / best["one per forward"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=64)
    parser.add_argument("--pack-tokens", type=int, default=16384)
    parser.add_argument("--short-tokens", type=int, default=100_000)
    parser.add_argument("--long-tokens", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup-sequences", type=int, default=24)
    parser.add_argument("--identity-only", action="store_true", help="no throughput or profile")
    parser.add_argument(
        "--long", default="32768,65536,131072", help="long contexts, each alone (past the card: refused)"
    )
    parser.add_argument("--gpu-tests-log", type=Path, help="`pytest -rA` output of the gpu tests, to record")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    record: dict = {**record_header()}
    started = time.perf_counter()
    loaded = build_synthetic("cuda", num_layers=args.layers)
    featureset = FeatureSet.default_for(args.layers)
    layers = [int(layer) for layer in featureset.layers]
    record["model"] = {"shape": "Qwen3.5-27B", "layers": args.layers, "featureset": featureset.canonical()}
    # as the service builds it: this GPU model's layer mode, its memory plan measured now
    extractor = build_extractor(Settings(device="cuda", pack_tokens=args.pack_tokens), loaded)
    record["elementwise"] = extractor.plan(Backend.FLA).fingerprint.elementwise
    record["policies"] = {
        name: (p.describe() if p else "one sequence per forward") for name, p in policies(args.pack_tokens).items()
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.gpu_tests_log and args.gpu_tests_log.exists():
        record["gpu_tests_log_tail"] = args.gpu_tests_log.read_text().splitlines()[-40:]
    record["run"] = extractor.device_run(featureset, Backend.FLA).model_dump(mode="json")  # the plan, the layer mode
    record["identity"] = identity(extractor, featureset, layers, args.pack_tokens)
    args.out.write_text(json.dumps(record, indent=2))  # each part as it ends: a run cut short keeps what it measured
    long = [int(n) for n in args.long.split(",") if n]
    record["long_contexts"] = long_contexts(extractor, featureset, layers, long)
    args.out.write_text(json.dumps(record, indent=2))
    if args.identity_only:
        return
    record["throughput"] = throughput(extractor, featureset, args)
    args.out.write_text(json.dumps(record, indent=2))
    print(json.dumps({mix: record["throughput"][mix]["best_tok_s"] for mix in MIXES}), flush=True)
    short = lengths_totalling(args.short_tokens, *MIXES["short"], seed=10)
    first = plan_packs(short, PackPolicy(args.pack_tokens))[0]
    ids = random_ids(short, int(loaded.config.vocab_size), seed=20)
    pack_items = [(encoded(ids[s.index]), "profile") for s in first.segments]
    record["profile_one_short_pack"] = profile_pack(extractor, pack_items, featureset)
    print(json.dumps(record["profile_one_short_pack"]["kernel_share_of_wall"]), flush=True)
    record["total_s"] = time.perf_counter() - started
    args.out.write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
