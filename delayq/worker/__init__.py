"""Running due jobs: one pass (claim, lease, call, record), the loop, recovery of dead runs'
jobs, handler resolution, time limits and signals, the retry ladder and the run's report.

It reads and writes only through store/; the CLI and the Queue façade start it.
"""
