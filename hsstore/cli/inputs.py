"""What the CLI reads from its user: sample files (JSONL, each line checked with its number), layer lists, and
the shortened ids that listings print, resolved back to whole ones."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from hsstore.cli.errors import CliError
from schemas.featureset import FeatureSet
from schemas.jsonl import JsonlError, parse_jsonl
from schemas.keys import check_content_hash_prefix, check_featureset_id, check_prompt_hash_prefix, is_prompt_hash
from schemas.samples import InvalidSampleError, parse_sample
from schemas.timestamps import stamp
from schemas.validation import describe_errors

if TYPE_CHECKING:
    from client import FeatureClient


class SampleFile:
    """A JSONL file of samples, every line already checked against the sample format."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise CliError(f"cannot read {path}: {exc.strerror}") from None
        self.samples = parse_jsonl(text, str(path))
        self.lines = [n for n, line in enumerate(text.decode("utf-8").splitlines(), 1) if line.strip()]
        for index, sample in enumerate(self.samples):
            try:
                parse_sample(sample)
            except InvalidSampleError as exc:
                raise JsonlError(str(path), self.lines[index], str(exc)) from None

    def where(self, index: int) -> str:
        return f"{self.path}, line {self.lines[index]}"

    def label(self, index: int) -> str:
        label = self.samples[index].get("id")
        return str(label) if label is not None else f"line {self.lines[index]}"

    def locate(self, message: str, offset: int = 0) -> str:
        """A service message that names `samples[i]` of a request that began at sample `offset`, with the file and
        line added."""
        found = re.search(r"samples\[(\d+)\]", message)
        if found and offset + int(found[1]) < len(self.samples):
            return f"{self.where(offset + int(found[1]))}: {message}"
        return message


def featureset_option(
    layers: str | None, dtype: str = "bfloat16", target_ids: bool = False, top_k: int | None = None
) -> FeatureSet | None:
    """`--layers 16,1,embed` (any order, normalised by FeatureSet), with `--dtype`, `--target-ids`, `--top-k`."""
    if layers is None and (dtype != "bfloat16" or target_ids or top_k is not None):
        raise CliError("--dtype, --target-ids and --top-k describe a featureset: give its --layers too")
    try:
        return FeatureSet.from_params(layers, dtype, target_ids, top_k)
    except ValidationError as exc:
        reasons = describe_errors(exc.errors(include_url=False, include_input=False))
        raise CliError(f"--layers {layers}: {reasons}") from None
    except ValueError as exc:
        raise CliError(f"--layers {layers}: {exc}") from None


def featureset_named(client: FeatureClient, featureset_id: str, layers: str | None) -> FeatureSet:
    """`--featureset ID`: the model's default featureset, or one an entry of the store holds (an id is a hash: only
    what was seen can be named by it)."""
    if layers is not None:
        raise CliError("give --featureset or --layers, not both")
    try:
        check_featureset_id(featureset_id)
    except ValueError as exc:
        raise CliError(f"--featureset: {exc}") from None
    default = client.info().default_featureset
    if default is not None and default.id == featureset_id:
        return default
    held = next(iter(client.entries_page(featureset=featureset_id, limit=1).entries), None)
    if held is None:
        raise CliError(
            f"featureset {featureset_id} is neither the model's default nor held by any entry of this store",
            "describe it by its parts instead: --layers (with --dtype, --target-ids, --top-k)",
        )
    return held.featureset


def key_lines(path: Path) -> list[dict[str, Any]]:
    """A JSONL of entry keys: objects with `prompt_hash` and any other key parts, as `hsstore extract --json`
    prints them."""
    try:
        lines = parse_jsonl(path.read_bytes(), str(path))
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    for number, line in enumerate(lines, 1):
        if not isinstance(line.get("prompt_hash"), str):
            raise CliError(f"{path}, entry {number}: an object with prompt_hash, as `hsstore extract --json` prints")
    return lines


def since_option(since: str | None) -> str | None:
    """An ISO-8601 time, or an age such as 30m, 12h, 7d (before now)."""
    if since is None:
        return None
    if age := re.fullmatch(r"(\d+)([smhd])", since.strip()):
        seconds = int(age[1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[age[2]]
        return stamp(datetime.now(UTC) - timedelta(seconds=seconds))
    return since


def resolve_prompt_hash(client: FeatureClient, given: str, **filters: Any) -> str:
    """A whole prompt hash from a unique prefix of one (as `hsstore entries` prints them); `filters` only narrow
    a prefix that several prompts share."""
    if is_prompt_hash(given):
        return given
    try:
        check_prompt_hash_prefix(given)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    hashes = sorted({m.prompt_hash for m in client.entries(prompt_hash=given, page_size=100, **filters)})
    if not hashes and any(v is not None for v in filters.values()):
        # the prefix may name a prompt stored only under other key parts: the read then says which exist
        hashes = sorted({m.prompt_hash for m in client.entries(prompt_hash=given, page_size=100)})
    if not hashes:
        raise CliError(f"no stored entry's prompt hash starts with {given}", "list them with `hsstore entries`")
    if len(hashes) > 1:
        raise CliError(f"{given} is the start of {len(hashes)} prompt hashes", "give more of the hash")
    return hashes[0]


def resolve_content_hash(client: FeatureClient, prompt_hash: str, given: str | None) -> str | None:
    """A whole content hash from a unique prefix (with or without `sha256:`), among one prompt's versions."""
    if given is None:
        return None
    try:
        prefix = check_content_hash_prefix(given)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    found = sorted({m.content_hash for m in client.entries(prompt_hash=prompt_hash, content_hash=prefix)})
    if len(found) != 1:
        what = "no version" if not found else f"{len(found)} versions"
        raise CliError(f"{what} of prompt {prompt_hash[:12]} has a content hash starting with {given}")
    return found[0]
