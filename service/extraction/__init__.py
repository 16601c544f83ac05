"""Running the model's forward for extraction on this device: the extractor (packs or one sequence per forward, each
result labelled with what ran), how packs are planned and keep each sequence's own rows, layers replayed from CUDA
graphs, the memory plan, the checks that a faster way keeps the bits, and results on their way to host memory."""
