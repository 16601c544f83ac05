"""The training feed: torch Datasets over the store (map-style and streamed), cache-through reads, collation,
worker processes collating into shared memory, and batches landed in GPU memory. Re-exported by `client`."""
