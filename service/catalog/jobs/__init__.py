"""Warm jobs' rows: the job and item records, and the SQL job store (queue, leases, completions) both engines run."""
