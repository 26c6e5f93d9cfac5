"""Tests of delayq/ops: what an operator asks (status, list, peek, purge, metrics, doctor)."""
