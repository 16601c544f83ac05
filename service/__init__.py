"""The hsstore service: owns the target model, extracts hidden states, stores and serves them."""

__version__ = "0.1.0"
