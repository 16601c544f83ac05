"""Warm jobs: submitted, persisted in the catalog, run in downtime windows by a background runner."""
