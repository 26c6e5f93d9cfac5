"""What every layer uses and nothing else: durations and moments as callers write them
(`durations.py`), and the signal mask of helper threads (`threads.py`)."""
