"""Flow control: what holds a queue's jobs back besides their due times — a pause, a rate
limit, a concurrency limit, a per-key lock. Its settings as the user writes them (limits.py,
locking.py's check_lock), changed and read back across the table and its Redis mirror
(settings.py), and the run-time side a pass's claims and drains meet through one Gate per
queue's turn (gate.py), with the per-key locks taken and handed on (locking.py).

It sits above the store and below the worker: the SQL and the Redis keys stay in
store/table/ and store/index/, which this package calls and which never call it.
"""
