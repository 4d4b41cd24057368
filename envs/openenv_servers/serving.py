"""What the servers here share: an openenv-core app of one game per WebSocket session, served by uvicorn."""

from __future__ import annotations

from collections.abc import Callable

import uvicorn
from openenv.core.env_server import Action, ConcurrencyConfig, Environment, Observation, create_fastapi_app

#: A session idle this long is closed by the server (a client that vanished without closing it).
SESSION_TIMEOUT_S = 600.0


def session_app(
    make_environment: Callable[[], Environment],
    action_type: type[Action],
    observation_type: type[Observation],
    max_sessions: int,
):
    """openenv-core's FastAPI app over ``make_environment``: a fresh environment per WebSocket session (a game of
    several turns is played over ``/ws``), at most ``max_sessions`` at once."""
    return create_fastapi_app(
        make_environment,
        action_type,
        observation_type,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=SESSION_TIMEOUT_S),
    )


def serve(app, host: str, port: int) -> None:
    """Serve ``app`` on ``host``:``port`` until killed (uvicorn's own lines: warnings only)."""
    uvicorn.run(app, host=host, port=port, log_level="warning")
