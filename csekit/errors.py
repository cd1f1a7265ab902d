"""The one exception csekit shows to users as a single line (the commands exit with status 2)."""


class DataError(ValueError):
    """Bad input: a data file, a model, a flag value. The message names the file (and line) or the flag and is meant
    to be shown as is, without a traceback."""
