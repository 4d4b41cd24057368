"""TextArena's single-player games as a multi-turn language environment (`dapo_textarena`).

TextArena (https://github.com/LeonGuertler/TextArena) has about a hundred text games behind one interface:
``reset(num_players, seed)``, ``get_observation()``, ``step(text)``, ``close()``. Here a problem is a game and a
seed: problem i of the training split is the game started with seed i, of the test split with seed
``TEST_SEED_OFFSET + i``, so a group's episodes all start from the same position and its advantages compare
like with like. An episode is one game:

- the first user message is the game's opening (its rules and first board); after each model turn, the game's
  messages since (hints, the board, a refused move) are the next user message;
- the model's turn goes to the game as it is (the game's rules say how to write a move, e.g. ``[5]``): the
  game's own registered wrappers, which would bracket a move for the model or repeat the whole history, are
  left out, since the chat already holds the history;
- when the game ends, its reward for the player is the episode's (``score``); the game's full reward (1) is a
  win (``acc``). A loss gives 0 or -1, or partial credit: GuessTheNumber, at its turn limit, gives how close
  the last guess came (``WIN_REWARD``). A move the game refused counts in
  ``invalid_moves`` (`rollout/invalid_moves`); the game decides what one costs (usually a retry, then a loss).
  A game cut at ``max_turns`` is not a win (reward 0).

A game that cannot run here is refused when the environment is built, with what it lacks: one that needs NLTK
data this machine cannot download (Wordle and the other word games offline), and games of several players
(multi-agent self-play: `envs.textarena_versus_env`). A game that raises mid-episode fails only its episode (`dapo_rllib.tasks.env_failures`).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping
from typing import Any

import textarena
from textarena.core import ObservationType
from textarena.envs.registration import ENV_REGISTRY

from dapo_rllib.columns import Info
from dapo_rllib.contracts import ResetInfo, ScoreInfo, score_info
from dapo_rllib.rollout.env_calls import EnvCalls
from dapo_rllib.tasks.env_failures import MALFORMED, EnvFailure
from dapo_rllib.tasks.game_env import split_seeds
from dapo_rllib.tasks.problem_env import PROBLEM_CONFIG, ProblemEnv

#: Value of the "dataset" config key: the games are started from seeds (the only source).
GENERATED = "generated"
#: Seconds a game may take to start when the environment is built (a game that downloads data may hang offline).
BUILD_TIMEOUT_S = 60.0
#: The reward of a game cut at max_turns before it ended: none (the games here give a loss 0, some -1), not a win.
UNFINISHED_REWARD = 0.0
#: A game's reward for a win. Only a win earns it: some games give a loss partial credit (GuessTheNumber at its turn
#: limit: 1 - |guess - target| / range), which a positive reward would count as a win.
WIN_REWARD = 1.0
#: Where the next issue takes up games of several players.
MULTI_PLAYER_POINTER = (
    "games of two players are multi-agent environments (RLlib's MultiAgentEnv) for self-play: "
    "envs.textarena_versus_env.TextArenaVersusEnv"
)

DEFAULT_CONFIG: dict[str, Any] = {
    "dataset": GENERATED,
    **PROBLEM_CONFIG,
    "game": "GuessTheNumber-v0",
    "game_options": {},
}


@dataclasses.dataclass(frozen=True)
class GameStart:
    """A game and the seed it starts from, with its opening as the prompt."""

    messages: tuple[dict, ...]
    ground_truth: str  # "<game>#<seed>": a game has no reference answer; this names the position
    data_source: str
    seed: int


class TextArenaEnv(ProblemEnv[GameStart]):
    """One TextArena single-player game per episode, a move per model turn.

    Config keys (all optional; see ``DEFAULT_CONFIG``):
        game: A TextArena environment id (``textarena.envs.registration.ENV_REGISTRY``), e.g.
            ``"GuessTheNumber-v0"``, ``"TowerOfHanoi-v0"``, ``"Minesweeper-v0-small"``.
        game_options: Keyword arguments of the game's constructor (``{"num_disks": 3}`` for TowerOfHanoi),
            over those of its registration.
        split: ``"train"`` (seeds 0, 1, ...) or ``"test"`` (seeds from ``dapo_rllib.tasks.game_env.TEST_SEED_OFFSET``: held out).
        num_problems: Games in the split (None: 1,000 for train, 200 for test).
        shuffle, seed: The draw order (:class:`ProblemEnv`).
    """

    DEFAULT_CONFIG = DEFAULT_CONFIG
    BUILTIN_DATASET = GENERATED
    PROBLEMS_NOUN = "games"

    def __init__(self, config: Mapping[str, Any] | None = None):
        settings = self.settings(config)
        self._game_id, self._options = settings["game"], settings["game_options"]
        if not isinstance(self._options, Mapping):
            raise TypeError(f"TextArenaEnv 'game_options' must be a dict, got {type(self._options).__name__}")
        check_single_player_game(self._game_id, self._options)
        self._game: Any = None  # the running game of this twin's episode
        self._invalid_moves = 0
        super().__init__(settings)

    def spawn(self) -> TextArenaEnv:
        twin = super().spawn()
        twin._game = None
        return twin

    # ----- problems: seeds --------------------------------------------------------------------
    def _load_problems(self, settings: Mapping[str, Any]) -> list[GameStart]:
        if settings["dataset"] != GENERATED:
            raise ValueError(
                f"TextArenaEnv 'dataset'={settings['dataset']!r}: games start from seeds; expected {GENERATED!r}"
            )
        return [self._start(seed) for seed in split_seeds("TextArenaEnv", settings["split"], settings["num_problems"])]

    def _start(self, seed: int) -> GameStart:
        game = start_game(self._game_id, self._options, seed)
        return GameStart(
            messages=({"role": "user", "content": game_text(game)},),
            ground_truth=f"{self._game_id}#{seed}",
            data_source=f"textarena/{self._game_id}",
            seed=seed,
        )

    # ----- an episode: one game -----------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list[dict], ResetInfo]:
        """Start the game of a problem (its seed); the opening is the first message."""
        messages, info = super().reset(seed=seed, options=options)
        self._game = start_game(self._game_id, self._options, self.problem(info[Info.PROBLEM_INDEX]).seed)
        self._invalid_moves = 0
        game_text(self._game)  # the opening, which the prompt already holds
        return messages, info

    def step(self, action: str | bytes | Mapping[str, Any]) -> tuple[list[dict], float, bool, bool, dict]:
        """Play the model's turn as a move; the game's answer is the next message, or the game is over."""
        problem = self._episode_problem("step")
        text = action["content"] if isinstance(action, Mapping) else action
        text = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
        done, _ = self._game.step(text)
        if not done:
            # A refused move leaves the count of errors above 0 until the next accepted move.
            self._invalid_moves += self._game.state.error_count > 0
            return [{"role": "user", "content": game_text(self._game)}], 0.0, False, False, {}
        rewards, game_info = self._game.close()
        player = game_info.get(0, {})
        self._invalid_moves += bool(player.get("invalid_move"))
        if not rewards or 0 not in rewards:
            raise EnvFailure(MALFORMED, f"{self._game_id} ended without a reward for the player: {rewards!r}")
        info = self._outcome(problem, float(rewards[0]), text, player.get("reason", ""))
        self._current = None
        return [], info[Info.SCORE], True, False, info

    def finish(self) -> tuple[float, ScoreInfo]:
        """A game cut at max_turns (or the token budget) before it ended: not a win."""
        problem = self._episode_problem("finish")
        self._current = None
        info = self._outcome(problem, UNFINISHED_REWARD, None, "not finished within the episode's turns")
        return UNFINISHED_REWARD, info

    def _outcome(self, problem: GameStart, reward: float, last_move: str | None, reason: str) -> ScoreInfo:
        rating = {
            Info.SCORE: reward,
            Info.ACC: reward >= WIN_REWARD,
            Info.PRED: last_move,
            Info.INVALID_MOVES: self._invalid_moves,
            "reason": reason,
        }
        return score_info(rating, ground_truth=problem.ground_truth, data_source=problem.data_source)


# ----- TextArena, at arm's length ----------------------------------------------------------------
def start_game(game_id: str, options: Mapping[str, Any], seed: int, num_players: int = 1) -> Any:
    """TextArena game `game_id`, without its wrappers, reset for `num_players` with `seed`."""
    game = textarena.make(game_id, **options)
    while hasattr(game, "env"):  # the registered wrappers: the chat keeps the history, the model brackets moves
        game = game.env
    game.reset(num_players=num_players, seed=seed)
    return game


def check_game_id(owner: str, game_id: Any) -> None:
    """Refuse a `game` that is not a TextArena game id, naming the close ones."""
    if not isinstance(game_id, str) or game_id not in ENV_REGISTRY:
        close = difflib.get_close_matches(str(game_id), list(ENV_REGISTRY), n=5)
        raise ValueError(f"{owner} 'game'={game_id!r} is not a TextArena game id; close ones: {close}")


def check_single_player_game(game_id: str, options: Mapping[str, Any]) -> None:
    """Refuse, with what is missing, a game that cannot run here: unknown, of several players, or needing data it
    cannot find; a game that does not start within BUILD_TIMEOUT_S (a download hanging offline) too."""
    check_game_id("TextArenaEnv", game_id)
    (outcome,) = EnvCalls(max_concurrent=1, timeout_s=BUILD_TIMEOUT_S).map(
        lambda seed: start_game(game_id, options, seed), [0]
    )
    if not isinstance(outcome, EnvFailure):
        state = type(outcome.state)
        if state is not textarena.SinglePlayerState:  # some games of several players start with one
            raise ValueError(
                f"TextArenaEnv 'game'={game_id!r} is a game of several players (its state is a {state.__name__}); "
                f"{MULTI_PLAYER_POINTER}"
            )
        return
    message = str(outcome)
    if re.search(r"\bplayers?\b", message, re.IGNORECASE):  # "The number of players has to be 2, received 1"
        raise ValueError(
            f"TextArenaEnv 'game'={game_id!r} is a game of several players ({message}); {MULTI_PLAYER_POINTER}"
        )
    if "LookupError" in message:
        resource = message.split("Resource", 1)[-1].split("not found", 1)[0].strip(" \x1b[93m")
        raise RuntimeError(
            f"TextArenaEnv 'game'={game_id!r} needs NLTK data that is not on this machine and could not be "
            f"downloaded: resource {resource}. Install it with `python -m nltk.downloader {resource}` where the "
            "network is reachable, or choose another game"
        )
    raise RuntimeError(f"TextArenaEnv 'game'={game_id!r} with options {dict(options)} did not start: {message}")


def game_text(game: Any) -> str:
    """The game's messages to the player to move since its last move, the moves as the players wrote them left
    out: the chat holds the player's own, and the game describes the other player's."""
    _, observations = game.get_observation()
    return "\n".join(text for _, text, kind in observations if kind != ObservationType.PLAYER_ACTION)
