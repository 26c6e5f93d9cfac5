"""What a producer asks of jobs, behind the Queue: a new job's checks and row (`spec.py`)."""
