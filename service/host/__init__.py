"""The host around the model: its arrangement with SGLang (handing the GPU over and back, reference completions, the
canary after a window) and the C heap of a process that extracts."""
