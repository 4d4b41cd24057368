"""When an environment cannot go on with an episode: the failure an environment raises, and its kinds.

An environment that runs elsewhere (a game library, a server over HTTP) can fail in ways that say nothing about
the model's answer: its server is down, it answers something that is not an observation, it raises, or a call
never returns. Such an episode cannot be scored, so its whole group is left out of the step (its advantages would
compare the model with the environment's failure), counted under ``rollout/env_errors/<kind>`` and warned about;
the run goes on, and stops with a clear error only when too many episodes fail (``max_env_error_rate``).

An environment raises :class:`EnvFailure` with a kind of its own choosing (a short snake_case word: the metric's
last part) where it knows what went wrong; the env runner names the two it sees itself: :data:`TIMEOUT` (a call
did not return within ``env_timeout_s``) and :data:`RAISED` (a call raised anything else).
"""

from __future__ import annotations

import re

#: A call (reset, step, finish) did not return within `env_timeout_s`.
TIMEOUT = "timeout"
#: A call raised an exception other than EnvFailure (a game's own error, a bug).
RAISED = "raised"
#: The environment's server could not be reached (down at start, killed, restarting).
SERVER_DOWN = "server_down"
#: The environment answered something that is not what its protocol promises.
MALFORMED = "malformed"

#: The kinds every run reports (0 when none happened); an environment's own kinds come when they happen.
ENV_ERROR_KINDS = (TIMEOUT, RAISED, SERVER_DOWN, MALFORMED)

_KIND = re.compile(r"[a-z][a-z0-9_]*")


class EnvFailure(RuntimeError):
    """An environment could not go on with its episode, for a reason that is not the model's doing.

    Args:
        kind: What went wrong, a snake_case word (``rollout/env_errors/<kind>``): one of this module's
            constants, or the environment's own.
        message: What happened, for the warning and for the error that stops a run past its error rate.
    """

    def __init__(self, kind: str, message: str):
        if not isinstance(kind, str) or not _KIND.fullmatch(kind):
            raise ValueError(f"EnvFailure kind {kind!r} must be a snake_case word such as {SERVER_DOWN!r}")
        super().__init__(message)
        self.kind = kind

    def __reduce__(self):  # so that it crosses process boundaries (Ray) with its kind
        return type(self), (self.kind, str(self))


def failure_of(error: BaseException) -> EnvFailure:
    """``error`` as an EnvFailure: itself, or of kind RAISED naming the exception's type and message."""
    if isinstance(error, EnvFailure):
        return error
    return EnvFailure(RAISED, f"{type(error).__name__}: {error}")
