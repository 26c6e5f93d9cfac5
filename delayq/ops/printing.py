"""`printable`: text a job's writer chose, spelled so that a terminal or a page shows it
rather than obeys it; below the command line and the web page, since both apply it."""

from __future__ import annotations

import unicodedata

# Characters a terminal acts on instead of showing: controls (ESC starts a sequence that can
# recolour, move the cursor or retitle the window; CR overwrites the line), format characters
# such as the bidi override U+202E, line and paragraph separators, and lone surrogates.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def printable(value: object) -> str:
    """`value` on one line, every control or format character written as its Python escape
    (\\x1b, \\r, \\u202e). Applied to all a job's writer chose (class, method, ext, data,
    result, error) in table and plain-text outputs, piped or not; --json escapes already."""
    text = "" if value is None else str(value)
    if text.isascii() and text.isprintable():
        return text
    return "".join(
        repr(char)[1:-1] if unicodedata.category(char) in _HIDDEN_CATEGORIES else char
        for char in text
    )
