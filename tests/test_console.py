"""The project's console (dapo_rllib.console): a library module's log line prints as the bare message,
notes on stdout and warnings on stderr, once, whatever the user configures on the root logger."""

import logging
import os
import subprocess
import sys

import pytest

from dapo_rllib.console import LOGGER_NAME, ConsoleHandler, install_console

SCRIPT = """
import logging, sys
{before}
import dapo_rllib
import dapo_rllib.console
dapo_rllib.console.install_console()  # again: still one handler
logging.getLogger("dapo_rllib.cli.train").info("building %s ...", "DAPO")
logging.getLogger("dapo_rllib.tasks.data.datasets").debug("not shown at the default level")
logging.getLogger("dapo_rllib.tasks.data.prompts").warning("a warning, %d%% sure", 100)
"""


def _run(before: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, DAPO_RLLIB_NO_REGISTRATION="1")  # no Ray needed here
    script = SCRIPT.format(before=before)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return out


@pytest.mark.parametrize(
    "before",
    ["", "logging.basicConfig(level=logging.DEBUG)"],
    ids=["default", "user-configured-root"],
)
def test_lines_print_bare_and_once(before):
    out = _run(before)
    assert out.stdout == "building DAPO ...\n"
    assert out.stderr == "a warning, 100% sure\n"


def test_the_handler_writes_to_the_streams_of_the_moment(capsys):
    logger = logging.getLogger(f"{LOGGER_NAME}.test_console")
    logger.info("to stdout")
    logger.error("to stderr")
    assert capsys.readouterr() == ("to stdout\n", "to stderr\n")


def test_install_keeps_one_handler_and_a_level_the_user_set(monkeypatch):
    logger = logging.getLogger(LOGGER_NAME)
    monkeypatch.setattr(logger, "level", logging.WARNING)
    assert install_console() is logger
    assert logger.level == logging.WARNING
    assert sum(isinstance(handler, ConsoleHandler) for handler in logger.handlers) == 1
