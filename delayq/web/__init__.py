"""`delayq web`: the operator's page over the Queue API the CLI uses — queues at a glance, job
search and detail, and (logged in with DELAYQ_WEB_TOKEN) retry, cancel, requeue. app.py builds
it, pages.py reads, actions.py writes, security.py guards; cli/web.py serves it."""

from __future__ import annotations

from .app import create_app

__all__ = ["create_app"]
