"""The target model: loading, kernel backends, the tiny test model."""
