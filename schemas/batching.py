"""How an entry's sequence shared its forward, as the fingerprint's `batching` field names it, and whether that gave
the model's own forward's bits of the sequence alone: the computation an entry key names, which a user holding the
model can run in their own process (`client.compute_features`).

Two policies give those bits by construction: one sequence per forward, and packs whose every op that can depend on
its row count runs at each sequence's own rows (`own_rows`, service/extraction/own_rows.py). Two policies of earlier
releases did not, and are still named so that their entries audit under the policy that wrote them: packs whose GEMMs
ran over the whole pack (`own_rows=False`: at the 27B shape cuBLAS picks other kernels at another row count, and the
bits parted from layer 1 on), and right-padded batches, which a probe of a few shapes let run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ONE_PER_FORWARD = "one sequence per forward, no padding"
_PACK = re.compile(r"(?:fixed-shape|own-rows) packs of (\d+) tokens, starts aligned to (\d+)\b.*")


@dataclass(frozen=True, slots=True)
class PackPolicy:
    """Sequences placed longest first into forwards of `tokens` positions from starts aligned to `align` tokens."""

    tokens: int
    align: int = 64
    own_rows: bool = True  # False: an earlier release's packs, kept only to audit what they wrote

    def describe(self) -> str:
        if not self.own_rows:  # the words entries of that release carry, to the letter
            return (
                f"fixed-shape packs of {self.tokens} tokens, starts aligned to {self.align} "
                "(a longer sequence alone in the next multiple; token mixing per sequence, fla's rule over cu_seqlens)"
            )
        return (
            f"own-rows packs of {self.tokens} tokens, starts aligned to {self.align} (every op whose bits can depend "
            "on its row count runs at each sequence's own rows: the bits of the model's own forward of each sequence)"
        )

    @classmethod
    def parse(cls, described: str) -> PackPolicy | None:
        """The policy a fingerprint names, if it is a packed one (what the audit re-extracts under)."""
        found = _PACK.fullmatch(described)
        if found is None:
            return None
        return cls(int(found[1]), int(found[2]), own_rows=described.startswith("own-rows"))


def own_forward(batching: str) -> bool:
    """Whether entries extracted under `batching` hold the bits of the model's own forward of each sequence alone."""
    if batching == ONE_PER_FORWARD:
        return True
    policy = PackPolicy.parse(batching)
    return policy is not None and policy.own_rows
