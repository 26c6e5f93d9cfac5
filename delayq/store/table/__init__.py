"""The table face of the store: every SQL statement delayq runs."""
