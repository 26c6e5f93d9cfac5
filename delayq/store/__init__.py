"""Where jobs live: the `delay_queue` table (the durable truth) and its queries, the database
URLs, and the Redis schedule index with its Lua scripts.

Nothing here runs a handler or decides a retry; it stores and answers.
"""
