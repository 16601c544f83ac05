"""The versions' rows: how a manifest is laid out over the normalized tables, the key spaces and fingerprints it
references, the listing filters and samples, and the SQL catalog both engines run (`rows.SqlVersionCatalog`)."""
