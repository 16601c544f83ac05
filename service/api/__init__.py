"""HTTP layer: thin routes over the library, one dependency module, one error mapping."""
