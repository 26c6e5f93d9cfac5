"""The bench/ commands, run small: each workload's figures and the tools that print them."""
