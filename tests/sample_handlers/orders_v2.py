"""A handler module whose own import fails on a sibling that was removed in a deploy: the
missing name, `tests.sample_handlers.orders`, is a string prefix of this module's name."""

import tests.sample_handlers.orders  # noqa: F401


def run(data: object) -> object:
    return data
