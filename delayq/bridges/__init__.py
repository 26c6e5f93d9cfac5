"""Ways jobs arrive from systems that are not delayq producers: expiring keys of another
Redis, as the keyspace-notification timers delayq replaces set them (`keyspace.py`,
`delayq listen`)."""
