"""The computation the service and a trainer share, and the one room of ours that imports torch for it: the model's
own forward of a sequence with the layers a featureset captures (`forward.py`), which kernels transformers bound
(`kernel_binding.py`), the fp8 featureset's arithmetic (`fp8.py`) and torch <-> RawTensor (`tensors.py`). It imports
only the contract (`schemas/`, which imports no torch); the service and the client import it."""
