"""`delayq web`: the operator's page over the same Queue API as the CLI — queues at a glance,
job search and detail, and (after logging in with DELAYQ_WEB_TOKEN) retry, cancel, requeue.

app.py assembles the Starlette application; pages.py reads, actions.py writes, security.py
owns the session, the CSRF token and the response headers. cli/web.py serves it.
"""

from __future__ import annotations

from .app import create_app

__all__ = ["create_app"]
