"""How csekit reports bad input: one line, exit status 2 (the commands and recipes catch :class:`DataError`; their
argument parsers report a bad flag the same way)."""


class DataError(ValueError):
    """Bad input: a data file, a model, a flag value. The message names the file (and line) or the flag and is meant
    to be shown as is, without a traceback."""


class OneLineUsageErrors:
    """Mix into an ``argparse.ArgumentParser`` class: a bad flag (unknown flag, bad choice or value) ends with one line
    ``PROG: error: MESSAGE (see PROG --help)`` and exit status 2, not the usage text first."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
