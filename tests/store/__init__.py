"""Tests of delayq/store: the table, the Redis index, URLs, servers and the seed upgrade."""
