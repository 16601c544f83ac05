"""HTTP layer: thin routes over the core services, one dependency module, one error mapping."""
