"""Tests of delayq/web: the dashboard over HTTP and in a browser."""
