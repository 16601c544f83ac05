"""`python -m hsstore.cli`."""

from hsstore.cli.root import app

app()
