"""Which sequences share a forward: longest first, right-padded to the batch's longest, under a token budget.

Right padding keeps every real token's computation the same as running it alone (every layer is causal, so no
token looks at the pads after it, and no padding mask is needed). Whether the kernels then give identical *bits*
depends on the kernels and the device: on the CPU the full-attention layers do not (measured), so batching is off by
default (`batch_tokens=0`). The fingerprint names the policy, and the audit re-extracts one sequence per forward and
compares bits, which is how a batching policy earns its place on a device.
"""

from __future__ import annotations


def plan_batches(lengths: list[int], batch_tokens: int, max_batch: int = 64) -> list[list[int]]:
    """Indices of `lengths` grouped into batches whose padded size (rows x longest) stays within `batch_tokens`.
    `batch_tokens` 0 means one sequence per forward."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    if batch_tokens <= 0:
        return [[i] for i in order]
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        longest = lengths[current[0]] if current else lengths[index]
        if current and ((len(current) + 1) * longest > batch_tokens or len(current) >= max_batch):
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


def describe(batch_tokens: int) -> str:
    if batch_tokens <= 0:
        return "one sequence per forward, no padding"
    return f"longest-first right-padded causal batches of at most {batch_tokens} padded tokens"
