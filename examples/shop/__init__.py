"""Example handlers for the demo: an online shop's delayed business actions."""
