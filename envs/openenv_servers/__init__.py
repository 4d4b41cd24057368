"""OpenEnv environment servers, and how the `dapo_openenv` environment runs them and talks to them.

- :mod:`envs.openenv_servers.guess_number`: a small game written with openenv-core's server classes, and its
  adapter (typed observations to chat messages and back); ``python -m envs.openenv_servers.guess_number --port P``.
- :mod:`envs.openenv_servers.textarena_game`: any single-player TextArena game served over OpenEnv, the player seeing
  what ``dapo_textarena`` shows in process; ``python -m envs.openenv_servers.textarena_game --port P --game ID``.
- :mod:`envs.openenv_servers.serving`: what the servers share (an app of a game per WebSocket session, uvicorn).
- :mod:`envs.openenv_servers.launcher`: a server command run as a local process on a free port (started, checked,
  restarted when it died, shared between the env runners of a machine, stopped with its owner).
- :mod:`envs.openenv_servers.session`: one episode's WebSocket session with a server, every call bounded in time
  and every failure an :class:`~dapo_rllib.tasks.env_failures.EnvFailure` of a named kind.

:class:`envs.openenv_env.OpenEnvEnv` puts them together.
"""
