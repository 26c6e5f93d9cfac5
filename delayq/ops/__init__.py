"""The operator's tools: status, list, peek, purge, requeue, metrics, logs and doctor. They
read the store and may change finished rows; they never run a handler."""
