"""What a version catalog answers besides manifests: a version's key alone (the tallies it keeps per key space are
the contract's StoreTally)."""

from __future__ import annotations

from dataclasses import dataclass

from schemas.api import ListedKey
from schemas.datasets import IndexRow


@dataclass(frozen=True, slots=True)
class StoredKey:
    """A version as a snapshot names it, where the catalog keeps it: its seq (a listing's cursor) and its key as the
    key listing names it (plain strings: a listing of 10^7 builds no model per row)."""

    seq: int
    listed: ListedKey

    @property
    def row(self) -> IndexRow:
        """The version as a dataset index records it."""
        k = self.listed
        return k.prompt_hash, k.content_hash, k.num_tokens, k.model_revision, k.backend, k.featureset_id
