"""The trainer's live target: compute a stored entry's features again in this process (`computation.py`) and refuse
to mix bits of another computation with them (`guard.py`)."""
