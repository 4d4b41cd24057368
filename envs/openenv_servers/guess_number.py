"""Guess-the-number as an OpenEnv environment server, and the adapter that plays it as a chat.

The server thinks of a whole number from 1 to ``max_number`` and answers each guess with a hint ("Higher: my
number is more than 5.", "Lower: ...") or "Correct!"; the game ends when the number is found (reward 1). A guess
is asked for in square brackets, as in TextArena's GuessTheNumber (the player may write anything around it). The
number is drawn from the reset's ``seed`` (``random.Random(seed)``), so the same seed is the same game: a group of
episodes on one problem plays one game.

It is written with openenv-core's server classes: typed ``Action``/``Observation``/``State`` (pydantic), an
``Environment`` with ``reset``/``step``/``state``, and ``create_fastapi_app``, which serves them over HTTP and
WebSocket (``/health``, ``/schema``, ``/reset``, ``/step``, ``/ws``). Its HTTP ``/reset`` and ``/step`` build a
fresh environment per request, so a game of several turns is played over ``/ws``, where each connection is a
session with a game of its own (``SUPPORTS_CONCURRENT_SESSIONS``)::

    python -m envs.openenv_servers.guess_number --port 8000 [--max-number 100] [--step-delay-s 0]

``--step-delay-s`` makes every step that slow (to test a client's timeouts). :class:`GuessNumberAdapter` is the
client side for :class:`envs.openenv_env.OpenEnvEnv` (its default ``adapter``); it imports nothing of the
training side, so that the server process starts with openenv-core alone.
"""

from __future__ import annotations

import argparse
import functools
import random
import re
import time
from typing import Any, Literal

from openenv.core.env_server import Action, Environment, Observation, State
from pydantic import Field

from envs.openenv_servers.serving import serve, session_app

#: Numbers from 1 to this, unless the server is started with another ``--max-number``.
DEFAULT_MAX_NUMBER = 100
Hint = Literal["start", "higher", "lower", "correct", "no_number"]
#: What the player is told when a reply holds no guess.
NO_GUESS_TEXT = "Write your guess in square brackets, for example [5]."


class GuessAction(Action):
    """A guess; ``None`` when the player's reply had no number."""

    guess: int | None = Field(default=None, description="The guessed number, or None: the reply had none")


class GuessObservation(Observation):
    """What the player is told after a reset or a guess (``done`` and ``reward`` come from ``Observation``)."""

    message: str = Field(description="The text shown to the player: the rules, then a hint per guess")
    hint: Hint = Field(description="'start' after a reset, then the verdict on the last guess")
    guess: int | None = Field(default=None, description="The last guess (None: none yet, or no number)")
    attempts: int = Field(default=0, ge=0, description="Guesses so far, replies without a number included")
    max_number: int = Field(ge=1, description="The secret is a whole number from 1 to this")


class GuessState(State):
    """The game behind the observations: the secret too."""

    secret: int | None = None
    max_number: int = DEFAULT_MAX_NUMBER


def rules(max_number: int) -> str:
    """The first message of a game."""
    return (
        f"I am thinking of a whole number from 1 to {max_number}. Guess it: write your guess in square brackets, "
        "for example [5]. After each guess I tell you whether my number is higher or lower."
    )


def hint_text(hint: Hint, guess: int | None) -> str:
    """The server's answer to a guess. The hint names the guess: a bare "Higher." leaves open whose number is
    higher, and small models read it both ways."""
    if hint == "higher":
        return f"Higher: my number is more than {guess}."
    if hint == "lower":
        return f"Lower: my number is less than {guess}."
    return "Correct!" if hint == "correct" else NO_GUESS_TEXT


class GuessNumberEnvironment(Environment[GuessAction, GuessObservation, GuessState]):
    """One game of guess-the-number per instance (the server makes one per WebSocket session)."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # no state outside the instance

    def __init__(self, max_number: int = DEFAULT_MAX_NUMBER, step_delay_s: float = 0.0):
        super().__init__()
        self._max_number, self._step_delay_s = max_number, step_delay_s
        self._state = GuessState(max_number=max_number)
        self._done = False

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> GuessObservation:
        secret = random.Random(seed).randint(1, self._max_number)
        self._state = GuessState(episode_id=episode_id, secret=secret, max_number=self._max_number)
        self._done = False
        return GuessObservation(message=rules(self._max_number), hint="start", max_number=self._max_number)

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:
        if self._state.secret is None or self._done:
            raise RuntimeError("step() without a game in progress: reset() first")
        time.sleep(self._step_delay_s)
        self._state.step_count += 1
        if action.guess is None:
            hint = "no_number"
        elif action.guess == self._state.secret:
            hint = "correct"
        else:
            hint = "higher" if action.guess < self._state.secret else "lower"
        self._done = hint == "correct"
        return GuessObservation(
            message=hint_text(hint, action.guess),
            hint=hint,
            guess=action.guess,
            attempts=self._state.step_count,
            max_number=self._max_number,
            done=self._done,
            reward=1.0 if self._done else 0.0,
        )

    @property
    def state(self) -> GuessState:
        return self._state


def create_guess_number_app(max_number: int = DEFAULT_MAX_NUMBER, step_delay_s: float = 0.0, max_sessions: int = 256):
    """The server's FastAPI app: at most ``max_sessions`` games at once (one per WebSocket connection)."""
    if max_number < 1:
        raise ValueError(f"max_number must be at least 1, got {max_number}")
    return session_app(
        functools.partial(GuessNumberEnvironment, max_number=max_number, step_delay_s=step_delay_s),
        GuessAction,
        GuessObservation,
        max_sessions,
    )


class GuessNumberAdapter:
    """The game as a chat, for :class:`envs.openenv_env.OpenEnvEnv` (its ``OpenEnvAdapter`` protocol).

    The model sees the server's messages as user turns. Its guess is the last number in square brackets in its
    reply, or, where it wrote none, the reply's last number: SmolLM2-135M-Instruct seldom writes the brackets
    before training, and a reward it almost never sees teaches it nothing (its tuned example, reading bracketed
    guesses only, won 2.1% of 384 games and stopped at step 1 with too few groups holding a win). A reply without a
    number is a guess of None, which the server answers with how to guess. An episode is right (+1) when the
    number was found, else wrong (-1), as DAPO's scorers rate answers.
    """

    data_source = "openenv/guess_number"
    observation_type = GuessObservation

    def messages(self, observation: GuessObservation) -> list[dict[str, str]]:
        return [{"role": "user", "content": observation.message}]

    def action(self, text: str) -> GuessAction:
        numbers = re.findall(r"\[\s*(-?\d+)\s*\]", text) or re.findall(r"-?\d+", text)
        return GuessAction(guess=int(numbers[-1]) if numbers else None)

    def outcome(self, observation: GuessObservation) -> dict[str, Any]:
        found = observation.hint == "correct"
        guess = observation.guess
        return {"score": 1.0 if found else -1.0, "acc": found, "pred": None if guess is None else str(guess)}


def main(argv: list[str] | None = None) -> None:
    """Serve the game on ``--host``:``--port`` until killed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--max-number", type=int, default=DEFAULT_MAX_NUMBER)
    parser.add_argument("--step-delay-s", type=float, default=0.0, help="sleep this long in every step")
    parser.add_argument("--max-sessions", type=int, default=256, help="games (WebSocket sessions) at once")
    args = parser.parse_args(argv)
    app = create_guess_number_app(args.max_number, args.step_delay_s, args.max_sessions)
    serve(app, args.host, args.port)


if __name__ == "__main__":
    main()
