"""Writing the store: requests prepared, extractions run once per entry key, checked for content, recorded, and the
SGLang canaries; the estimator prices a job before it runs."""
