"""The core services the routes call, each with one job: reading, writing (extracting) and auditing; and the
gate and windows that say when extraction may run."""
