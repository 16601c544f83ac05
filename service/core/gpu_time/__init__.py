"""When extraction may have the GPU: downtime windows (SGLang lends it) and the gate every extraction passes."""
