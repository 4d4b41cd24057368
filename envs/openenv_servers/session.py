"""One episode's WebSocket session with an OpenEnv server: every call bounded in time, every failure named.

OpenEnv servers keep a game only within a WebSocket session (``/ws``; their HTTP ``/reset`` and ``/step`` build
a fresh environment per request), so each episode opens its own connection and speaks OpenEnv's protocol over
it, with openenv-core's own message types: ``WSResetMessage``/``WSStepMessage`` out, ``WSObservationResponse``
(``{"observation", "reward", "done"}``) or ``WSErrorResponse`` back. One connection per episode is what makes
concurrent episodes safe: they share nothing but the server.

openenv-core's ``EnvClient`` speaks the same protocol, but asynchronously (its ``sync()`` wrapper runs an event
loop thread per client), with no bound on a whole call and one ``RuntimeError`` for every failure; the env runner
steps episodes on a thread pool and needs each call to end within ``timeout_s`` and each failure as an
:class:`~dapo_rllib.tasks.env_failures.EnvFailure` of a kind it can count. So this module talks to the socket
itself, with websockets' synchronous client:

- ``server_down``: nothing listens at the URL, or the connection broke (the server died mid-episode);
- ``request_timeout``: connecting, or an answer, took longer than ``timeout_s``;
- ``malformed``: the answer is not JSON, not one of the protocol's messages, or the server does not speak it;
- ``server_error``: the server answered with an error (its environment raised, the action did not validate,
  it has no room for another session).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pydantic
from openenv.core.env_server import WSErrorResponse, WSObservationResponse, WSResetMessage, WSStepMessage
from openenv.core.utils import convert_to_ws_url
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.sync.client import connect

from dapo_rllib.tasks.env_failures import MALFORMED, SERVER_DOWN, EnvFailure

#: The server did not answer (or accept the connection) within the timeout.
REQUEST_TIMEOUT = "request_timeout"
#: The server answered with an error message of its protocol.
SERVER_ERROR = "server_error"

# Observations with images or long documents are large; websockets' default limit is 1 MiB.
_MAX_MESSAGE_BYTES = 64 * 2**20
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class ServerSession:
    """A WebSocket session with the OpenEnv server at ``url`` (``http(s)://host:port``): one game.

    Args:
        url: The server's base URL.
        timeout_s: Seconds that connecting, and each answer, may take.

    Raises:
        EnvFailure: The connection could not be opened (kinds as in the module's docstring).
    """

    def __init__(self, url: str, timeout_s: float):
        self.url, self._timeout_s = url, timeout_s
        self._ws_url = f"{convert_to_ws_url(url.rstrip('/'))}/ws"
        self._stack = contextlib.ExitStack()
        # A proxy from the environment would only stand between us and a server on this machine.
        proxy = None if urlsplit(url).hostname in _LOOPBACK_HOSTS else True
        with self._failures("connecting"):
            self._ws = self._stack.enter_context(
                connect(
                    self._ws_url, open_timeout=timeout_s, close_timeout=1.0, proxy=proxy, max_size=_MAX_MESSAGE_BYTES
                )
            )

    def reset(self, **kwargs: Any) -> dict[str, Any]:
        """Start the session's game with the reset arguments ``kwargs`` (``seed``, ...): its first observation
        payload, ``{"observation": {...}, "reward": ..., "done": ...}``."""
        return self._request(WSResetMessage(data=kwargs), "reset")

    def step(self, action: dict[str, Any]) -> dict[str, Any]:
        """Send ``action`` (the action's fields): the observation payload that follows it."""
        return self._request(WSStepMessage(data=action), "step")

    def close(self) -> None:
        """Close the connection (the server ends the session and its game); safe to call again."""
        with contextlib.suppress(Exception):  # a broken connection is as closed as it gets
            self._stack.close()

    def _request(self, message: WSResetMessage | WSStepMessage, what: str) -> dict[str, Any]:
        with self._failures(what):
            self._ws.send(message.model_dump_json())
            raw = self._ws.recv(timeout=self._timeout_s)
        try:
            reply = json.loads(raw)
        except (TypeError, ValueError):
            raise EnvFailure(MALFORMED, f"{what}: {self.url} answered {raw[:200]!r}, which is not JSON") from None
        kind = reply.get("type") if isinstance(reply, dict) else None
        try:
            if kind == "error":
                error = WSErrorResponse.model_validate(reply).data
                raise EnvFailure(
                    SERVER_ERROR, f"{what}: {self.url} answered error {error.get('code')}: {error.get('message')}"
                )
            observation = WSObservationResponse.model_validate(reply).data
        except pydantic.ValidationError as error:
            raise EnvFailure(
                MALFORMED, f"{what}: {self.url} answered {str(raw)[:200]!r}, not an OpenEnv observation: {error}"
            ) from None
        if not isinstance(observation.get("observation"), dict):
            raise EnvFailure(MALFORMED, f"{what}: {self.url} answered {str(raw)[:200]!r}, without an observation")
        return observation

    @contextlib.contextmanager
    def _failures(self, what: str) -> Iterator[None]:
        """Turn what the socket raises into EnvFailures (the connection is closed: its state is unknown)."""
        try:
            yield
        except TimeoutError:
            self.close()
            raise EnvFailure(REQUEST_TIMEOUT, f"{what}: no answer from {self.url} within {self._timeout_s} s") from None
        except InvalidHandshake as error:
            self.close()
            raise EnvFailure(
                MALFORMED, f"{what}: {self._ws_url} does not speak OpenEnv's WebSocket protocol: {error}"
            ) from None
        except (ConnectionClosed, OSError) as error:
            self.close()
            raise EnvFailure(SERVER_DOWN, f"{what}: cannot reach {self.url}: {type(error).__name__}: {error}") from None
