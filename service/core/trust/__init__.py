"""Checking what is stored: audits (re-extraction), scrubs of the bytes, the catalog rebuilt from the documents, and
imports checked against the model."""
