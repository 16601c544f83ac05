"""Bringing stores of earlier releases up to date: the versions normalized into their tables, and old prompt hashes
re-keyed to today's."""
