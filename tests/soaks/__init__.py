"""Soaks: long runs under faults, each a `python -m tests.soaks.NAME` command; the suite runs
short ones (tests/faults/)."""
