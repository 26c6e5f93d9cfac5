"""A handler module that imports a package which is not installed."""

import delayq_test_no_such_dependency  # noqa: F401


def run(data: object) -> object:
    return data
