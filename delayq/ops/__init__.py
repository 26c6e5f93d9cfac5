"""The operator's view and tools: status, list and peek, purge and requeue, metrics, logs and
doctor. They read the store and may change finished rows; they never run a handler.
"""
