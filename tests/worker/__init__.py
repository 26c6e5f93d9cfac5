"""Tests of delayq/worker: a run, its pool, leases, handlers, retries and time limits."""
