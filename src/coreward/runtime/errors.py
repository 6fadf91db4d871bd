"""One exception type for user-facing errors: the CLI prints its message (no traceback) and exits 2."""


class CorewardError(Exception):
    """A problem with the user's input (file, row, key, endpoint) that the message fully explains."""
