"""Tests of delayq/store/table/: the table, its schema and upgrade, its queries, the counts
and privileges, what the columns hold."""
