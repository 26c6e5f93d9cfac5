"""Tests of the top-level modules: the Queue and AsyncQueue API, config, durations, listen."""
