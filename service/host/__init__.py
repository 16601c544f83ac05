"""The host's arrangement with SGLang: handing the GPU over and back, and asking it for reference completions."""
