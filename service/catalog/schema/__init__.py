"""The catalog's schema: its tables as both engines write them, the dialects' differences, and the migration steps'
runner that records each part's version."""
