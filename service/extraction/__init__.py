"""Running the model's forward for extraction on this device: the extractor (packs or one sequence per forward, each
result labelled with what ran), how a call runs here (run_plan.py: the kernels, fused forwards, pack policy, attention
kernel and replayed layers, and the fingerprint they make, worked out once), how packs are planned and keep each
sequence's own rows, layers replayed from CUDA graphs, the memory plan, the checks that a faster way keeps the bits,
and results on their way to host memory."""
