"""What a producer asks of jobs, behind the Queue: a new job's checks, the row it becomes and
the views `show` and `list` print (`spec.py`); adding jobs (`adding.py`); finding, cancelling
and retrying jobs already added (`changes.py`)."""
