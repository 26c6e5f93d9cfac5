"""Tests of delayq/cli: the `delayq` command, through CliRunner and as a real process."""
