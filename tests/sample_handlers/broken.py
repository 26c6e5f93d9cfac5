"""A handler module whose import fails with its own error."""


def run(data: object) -> object:
    return data


raise RuntimeError("broken on purpose")
