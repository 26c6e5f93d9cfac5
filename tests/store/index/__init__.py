"""Tests of delayq/store/index/: the journal, the clock, the Sentinel and Cluster clients and
their URLs."""
