"""The project's console: library modules log through `logging.getLogger(__name__)`, under the
"dapo_rllib" logger, whose handler prints each message alone, as `print` would.

Progress and notes (INFO) go to stdout, warnings and errors to stderr, with no level or time prefix:
the console reads as plain lines. The "dapo_rllib" logger does not propagate, so that a root handler
the user configures does not print each line twice; to see DEBUG lines, or to route the lines
elsewhere, configure that logger (its level, its handlers). `import dapo_rllib` installs the handler.
"""

from __future__ import annotations

import logging
import sys

LOGGER_NAME = "dapo_rllib"


class ConsoleHandler(logging.Handler):
    """Writes a record's message (and its traceback, if any) on a line of its own: INFO and below
    to stdout, WARNING and above to stderr, the streams `sys` holds when the record comes (so that
    a redirected or captured stream gets it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = sys.stderr if record.levelno >= logging.WARNING else sys.stdout
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:
            self.handleError(record)


def install_console() -> logging.Logger:
    """The "dapo_rllib" logger with its console handler (once), at INFO unless a level is set already."""
    logger = logging.getLogger(LOGGER_NAME)
    if not any(isinstance(handler, ConsoleHandler) for handler in logger.handlers):
        logger.addHandler(ConsoleHandler())
        logger.propagate = False
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    return logger
