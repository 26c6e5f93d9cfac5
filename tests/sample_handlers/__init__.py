"""Real handler modules the tests schedule; each records what it did in a log file it is given."""
