"""From a sample to tensors: tokenisation, the lean hooked forward, summary statistics."""
