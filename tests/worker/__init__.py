"""Tests of delayq/worker: a run, its slots, leases, handlers, retries and time limits."""
