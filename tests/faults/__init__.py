"""Faults, outages, partitions and soaks across the layers, on real processes and servers."""
