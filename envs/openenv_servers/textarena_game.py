"""A TextArena single-player game served as an OpenEnv environment server, and the adapter that plays it as a chat.

OpenEnv's catalogue serves TextArena's games behind its server standard; this is that, written with openenv-core's
server classes: any single-player TextArena game id (with its constructor's options) becomes a server whose
``reset(seed)`` starts the game of that seed and whose ``step`` plays a move. The player sees what
:class:`envs.textarena_env.TextArenaEnv` shows in process, the same text from the same functions
(:func:`envs.textarena_env.start_game`, :func:`envs.textarena_env.game_text`), so a game learnt in process and
the same game over the server differ only by the transport::

    python -m envs.openenv_servers.textarena_game --port 8000 --game GuessTheNumber-v0 \\
        --game-options '{"min_number": 1, "max_number": 10, "max_turns": 4}'

A move is the model's whole reply: the game reads its move from it (``[5]`` for GuessTheNumber) and refuses one
it cannot read, which the observation counts in ``invalid_moves``. When the game ends, the observation carries
its reward for the player (``done``). As in :mod:`envs.openenv_servers.guess_number`, a game of several turns is
played over the WebSocket endpoint (``/ws``), a session per connection.
"""

from __future__ import annotations

import argparse
import functools
import json
from typing import Any

from openenv.core.env_server import Action, Environment, Observation, State
from pydantic import Field

from dapo_rllib.columns import Info
from envs.openenv_servers.serving import serve, session_app
from envs.textarena_env import UNFINISHED_REWARD, WIN_REWARD, check_single_player_game, game_text, start_game


class MoveAction(Action):
    """The player's move: its reply as it wrote it (the game finds the move in it)."""

    move: str = Field(description="The player's reply; the game reads its move from it")


class GameObservation(Observation):
    """What the player is told after a reset or a move (``done`` and ``reward`` come from ``Observation``)."""

    message: str = Field(description="The game's messages since the player's last move (after a reset: the rules)")
    last_move: str | None = Field(default=None, description="The move just played (None after a reset)")
    invalid_moves: int = Field(default=0, ge=0, description="Moves the game refused so far")
    reason: str = Field(default="", description="Why the game ended, as the game says (empty while it goes on)")


class GameState(State):
    """The game behind the observations: which game, from which seed."""

    game: str = ""
    seed: int | None = None


class TextArenaGameEnvironment(Environment[MoveAction, GameObservation, GameState]):
    """One TextArena game per instance (the server makes one per WebSocket session)."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each instance holds its own game

    def __init__(self, game: str, game_options: dict[str, Any]):
        super().__init__()
        self._game_id, self._options = game, game_options
        self._state = GameState(game=game)
        self._game: Any = None  # the running game; None once it ended
        self._invalid_moves = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> GameObservation:
        seed = 0 if seed is None else seed
        self._game = start_game(self._game_id, self._options, seed)
        self._state = GameState(episode_id=episode_id, game=self._game_id, seed=seed)
        self._invalid_moves = 0
        return GameObservation(message=game_text(self._game))

    def step(self, action: MoveAction, timeout_s: float | None = None, **kwargs: Any) -> GameObservation:
        if self._game is None:
            raise RuntimeError("step() without a game in progress: reset() first")
        self._state.step_count += 1
        done, _ = self._game.step(action.move)
        if not done:
            # A refused move leaves the count of errors above 0 until the next accepted move.
            self._invalid_moves += self._game.state.error_count > 0
            return GameObservation(
                message=game_text(self._game), last_move=action.move, invalid_moves=self._invalid_moves
            )
        rewards, game_info = self._game.close()
        self._game = None
        player = game_info.get(0, {})
        self._invalid_moves += bool(player.get("invalid_move"))
        if not rewards or 0 not in rewards:
            raise RuntimeError(f"{self._game_id} ended without a reward for the player: {rewards!r}")
        return GameObservation(
            message="",
            last_move=action.move,
            invalid_moves=self._invalid_moves,
            reason=str(player.get("reason", "")),
            done=True,
            reward=float(rewards[0]),
        )

    @property
    def state(self) -> GameState:
        return self._state


def create_textarena_app(game: str, game_options: dict[str, Any] | None = None, max_sessions: int = 256):
    """The server's FastAPI app for TextArena game ``game``: at most ``max_sessions`` games at once.

    Raises:
        ValueError: ``game`` is not a single-player TextArena game that runs here (as for ``dapo_textarena``).
    """
    game_options = dict(game_options or {})
    check_single_player_game(game, game_options)
    return session_app(
        functools.partial(TextArenaGameEnvironment, game=game, game_options=game_options),
        MoveAction,
        GameObservation,
        max_sessions,
    )


class TextArenaGameAdapter:
    """The served game as a chat, for :class:`envs.openenv_env.OpenEnvEnv` (its ``OpenEnvAdapter`` protocol).

    The game's messages are user turns and the model's reply is the move, as in ``dapo_textarena``. The
    episode's score is the game's reward when it ended (``WIN_REWARD`` is a win), and ``UNFINISHED_REWARD``
    (not a win) when the env runner cut it; refused moves count in ``invalid_moves``.
    """

    data_source = "openenv/textarena"
    observation_type = GameObservation

    def messages(self, observation: GameObservation) -> list[dict[str, str]]:
        return [{"role": "user", "content": observation.message}]

    def action(self, text: str) -> MoveAction:
        return MoveAction(move=text)

    def outcome(self, observation: GameObservation) -> dict[str, Any]:
        reward = float(observation.reward) if observation.done else UNFINISHED_REWARD
        return {
            Info.SCORE: reward,
            Info.ACC: reward >= WIN_REWARD,
            Info.PRED: observation.last_move,
            Info.INVALID_MOVES: observation.invalid_moves,
        }


def main(argv: list[str] | None = None) -> None:
    """Serve the game on ``--host``:``--port`` until killed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--game", required=True, help="a single-player TextArena game id, e.g. GuessTheNumber-v0")
    parser.add_argument("--game-options", type=json.loads, default={}, help="the game's options, a JSON object")
    parser.add_argument("--max-sessions", type=int, default=256, help="games (WebSocket sessions) at once")
    args = parser.parse_args(argv)
    if not isinstance(args.game_options, dict):
        parser.error(f"--game-options {args.game_options!r}: expected a JSON object")
    app = create_textarena_app(args.game, args.game_options, args.max_sessions)
    serve(app, args.host, args.port)


if __name__ == "__main__":
    main()
