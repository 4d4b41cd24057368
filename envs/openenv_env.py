"""An OpenEnv environment server as a multi-turn DAPO environment (`dapo_openenv`).

OpenEnv (openenv-core) is Meta's and Hugging Face's standard for environment servers: FastAPI servers with
``reset``/``step``/``state`` over typed (pydantic) actions and observations, an observation carrying its
``reward`` and ``done``. This environment plays one over several turns: ``reset`` opens a session with the server
(one WebSocket connection per episode, so that episodes on twins run concurrently without sharing a game), resets
its game and shows the first observation as chat messages; each ``step`` turns the model's text into a typed
action, sends it, and shows the observation that comes back; the episode ends when the server says ``done``, or
when the env runner stops it and calls ``finish``, which rates the last observation.

Problems are seeds: problem ``i`` of the train split is the server's game of ``seed=i``, the test split's start
at ``TEST_SEED_OFFSET`` (a dataset file instead lists each problem's reset arguments, a JSON object per line).
The same seed must give the server's same game: a group's episodes play one game, as DAPO's group advantage
assumes. The server's ``seed`` is not the ``seed`` config key, which orders the draws.

What observations mean is the server's business, so a small adapter maps them (config ``adapter``, see
:class:`OpenEnvAdapter`): typed observation -> chat messages, model text -> typed action, observation -> the
episode's rating (``{"score", "acc", "pred"}``: the reward, right or not, the answer). The default adapter plays
the guess-the-number server of :mod:`envs.openenv_servers.guess_number`.

The server is one already running (``url``), or a command this environment runs (``server_command``, see
:mod:`envs.openenv_servers.launcher`: started on first use, restarted when it died, shared between the env runners
of a machine with ``share_server``). Every call has a timeout and a bounded number run at once; when the server
cannot be reached, answers something that is not an observation, or is too slow, the call raises an
:class:`~dapo_rllib.tasks.env_failures.EnvFailure` (``server_down``, ``malformed``, ``request_timeout``,
``server_error``), which the env runner counts under ``rollout/env_errors/<kind>`` and which drops the group.
"""

from __future__ import annotations

import dataclasses
import importlib
import numbers
import shutil
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import pydantic

from dapo_rllib.columns import Info
from dapo_rllib.contracts import ResetInfo, ScoreInfo, ScoreResult
from dapo_rllib.tasks.data.datasets import read_rows
from dapo_rllib.tasks.env_failures import MALFORMED, SERVER_DOWN, EnvFailure
from dapo_rllib.tasks.problem_env import PROBLEM_CONFIG, ProblemEnv
from dapo_rllib.tasks.rewards.text import as_text
from envs.openenv_servers.launcher import LocalServer, RunningServer
from envs.openenv_servers.session import ServerSession

#: Value of the "dataset" config key: problem i is the server's game of seed i (of the split).
SEEDS = "seeds"
#: The test split's seeds start here: far above any training split, and within 32 bits for servers that need it.
TEST_SEED_OFFSET = 1_000_000_000
#: Problems in a split when `num_problems` is None.
DEFAULT_SPLIT_SIZES = {"train": 1000, "test": 200}
#: The adapter of the guess-the-number server.
DEFAULT_ADAPTER = "envs.openenv_servers.guess_number:GuessNumberAdapter"

#: Config keys and their defaults.
DEFAULT_CONFIG: dict[str, Any] = {
    "dataset": SEEDS,
    **PROBLEM_CONFIG,
    "server_command": None,
    "url": None,
    "share_server": False,
    "adapter": DEFAULT_ADAPTER,
    "max_concurrent_requests": 64,
    "request_timeout_s": 30.0,
    "startup_timeout_s": 60.0,
}


class OpenEnvAdapter(Protocol):
    """What :class:`OpenEnvEnv` needs to know of a server's game (the ``adapter`` config key names a class with
    these attributes; it is built without arguments). :class:`envs.openenv_servers.guess_number.GuessNumberAdapter`
    is one.

    Attributes:
        data_source: What the episodes report under (metrics are per data source), e.g. ``"openenv/my_game"``.
        observation_type: The server's ``Observation`` class: each answer is validated into it (with its
            ``reward`` and ``done``); one that does not validate fails the episode as ``malformed``.
    """

    data_source: str
    observation_type: type[pydantic.BaseModel]

    def messages(self, observation: Any) -> list[dict[str, str]]:
        """The chat messages the model sees for ``observation`` (the first, and each one that does not end it)."""

    def action(self, text: str) -> pydantic.BaseModel | dict[str, Any]:
        """The typed action (or its fields) of the model's turn ``text``."""

    def outcome(self, observation: Any) -> ScoreResult:
        """The episode's rating if it ended at ``observation``: ``{"score": reward, "acc": bool, "pred": str or
        None}``. It rates the last observation of an episode the server ended (``done``) or the env runner did."""


@dataclasses.dataclass(frozen=True)
class ServerGame:
    """A problem: the arguments of the server's reset (``{"seed": i}`` for generated ones).

    The prompt comes from the server at reset (``messages`` is empty), and only the server knows the answer
    (``ground_truth`` is empty)."""

    reset_kwargs: Mapping[str, Any]
    data_source: str
    messages: tuple[dict, ...] = ()
    ground_truth: str = ""


def generate_seeds(split: str, num_problems: int | None) -> list[dict[str, int]]:
    """The reset arguments of a split's games: ``{"seed": i}``, test seeds from :data:`TEST_SEED_OFFSET`."""
    if split not in DEFAULT_SPLIT_SIZES:
        raise ValueError(f"OpenEnvEnv 'split'={split!r}; expected one of {sorted(DEFAULT_SPLIT_SIZES)}")
    start = TEST_SEED_OFFSET if split == "test" else 0
    return [{"seed": start + i} for i in range(num_problems or DEFAULT_SPLIT_SIZES[split])]


def load_reset_arguments(path: str | Path) -> list[dict[str, Any]]:
    """The reset arguments in a ``.jsonl``/``.parquet`` file, a JSON object per game (``{"seed": 7, ...}``)."""
    return read_rows(Path(path), "OpenEnv reset arguments")


def load_adapter(spec: str | type) -> OpenEnvAdapter:
    """The adapter ``spec`` names (``"package.module:Class"``, or the class), built without arguments.

    Raises:
        ValueError: ``spec`` is not of that form, or names nothing importable.
        TypeError: The class lacks what :class:`OpenEnvAdapter` needs.
    """
    if isinstance(spec, str):
        module_name, _, class_name = spec.partition(":")
        if not module_name or not class_name:
            raise ValueError(f"OpenEnvEnv 'adapter'={spec!r}; expected 'package.module:Class'")
        try:
            spec = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError) as error:
            raise ValueError(f"OpenEnvEnv 'adapter'={spec!r} cannot be loaded: {error}") from None
    if not isinstance(spec, type):
        raise TypeError(f"OpenEnvEnv 'adapter' must be 'package.module:Class' or a class, got {spec!r}")
    adapter = spec()
    needed = ("data_source", "observation_type", "messages", "action", "outcome")
    missing = [name for name in needed if not hasattr(adapter, name)]
    if missing or not (
        isinstance(adapter.observation_type, type) and issubclass(adapter.observation_type, pydantic.BaseModel)
    ):
        raise TypeError(
            f"OpenEnvEnv 'adapter' {spec.__name__} lacks {missing or ['a pydantic observation_type']}; an adapter "
            "has data_source, observation_type (the server's Observation class), messages(), action() and outcome()"
        )
    return adapter


class OpenEnvEnv(ProblemEnv[ServerGame]):
    """Multi-turn environment over an OpenEnv server's games.

    Config keys (see ``DEFAULT_CONFIG``); exactly one of ``server_command`` and ``url``:
        server_command: The command line of a server to run on this machine (a list of str), with ``{port}``
            where its port goes, e.g. ``[sys.executable, "-m", "envs.openenv_servers.guess_number", "--port",
            "{port}"]``. It is started on the first reset, and again when it died.
        url: The base URL of a server already running (``http://host:port``).
        share_server: With ``server_command``: one server for all env runners of this machine (the first starts
            it), instead of one per environment (default: a server per env runner keeps their load apart).
        adapter: The ``"package.module:Class"`` (or class) of the :class:`OpenEnvAdapter` of the server's game.
        max_concurrent_requests: Calls to the server running at once, from this environment and its twins.
        request_timeout_s: Seconds that connecting, and each answer of the server, may take.
        startup_timeout_s: Seconds a started server has to answer ``/health``.
        dataset: ``"seeds"`` (problem i of the split is seed i; the test split's from ``TEST_SEED_OFFSET``), or a
            ``.jsonl``/``.parquet`` file of reset arguments, one object per problem.
        split, num_problems (None: 1,000 train, 200 test), shuffle, seed: as in :class:`ProblemEnv`.
    """

    DEFAULT_CONFIG = DEFAULT_CONFIG
    BUILTIN_DATASET = SEEDS
    PROBLEMS_NOUN = "games"
    generate = staticmethod(generate_seeds)
    load_file = staticmethod(load_reset_arguments)

    def __init__(self, config: Mapping[str, Any] | None = None):
        settings = self.settings(config)
        self._adapter = load_adapter(settings["adapter"])
        self._request_timeout_s = _positive(settings, "request_timeout_s")
        self._server = _server(settings)
        self._slots = threading.BoundedSemaphore(_positive_int(settings, "max_concurrent_requests"))
        super().__init__(settings)
        self._owns_server = True  # twins share it, and do not stop it
        self._session: ServerSession | None = None
        self._observation: Any = None  # the last observation of the episode in progress

    def _load_problems(self, settings: Mapping[str, Any]) -> list[ServerGame]:
        games = super()._load_problems(settings)
        return [ServerGame(dict(kwargs), self._adapter.data_source) for kwargs in games]

    def spawn(self) -> OpenEnvEnv:
        twin = super().spawn()
        twin._session, twin._observation, twin._owns_server = None, None, False
        return twin

    @property
    def server_url(self) -> str:
        """The URL of the server (starting it if this environment runs one and it is not running)."""
        return self._server.url()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, str]], ResetInfo]:
        """Start the game of the problem (see :meth:`ProblemEnv.reset`) on a new session: its first messages.

        Raises:
            EnvFailure: The server could not be started or reached, answered garbage, or took too long.
        """
        self._end_episode()
        _, info = super().reset(seed=seed, options=options)
        game = self._problems[info[Info.PROBLEM_INDEX]]
        self._session = self._call(lambda: ServerSession(self._server.url(), self._request_timeout_s))
        self._observation = self._play(lambda session: session.reset(**game.reset_kwargs))
        return self._adapter.messages(self._observation), info

    def step(self, action: str | bytes | Mapping[str, Any]) -> tuple[list[dict], float, bool, bool, ScoreInfo]:
        """Play the model's turn (its text, or the env runner's assistant message): the observation's messages and
        reward 0, or, when the server ends the game, no messages and the episode's score (``terminated``). Each
        turn's info is the rating the episode would have if it ended there (:meth:`OpenEnvAdapter.outcome`).

        Raises:
            EnvFailure: As for :meth:`reset`; the episode cannot go on.
        """
        game = self._episode_problem("step")
        text = action["content"] if isinstance(action, Mapping) else as_text(action)
        fields = self._adapter.action(text)
        fields = fields.model_dump() if isinstance(fields, pydantic.BaseModel) else dict(fields)
        self._observation = self._play(lambda session: session.step(fields))
        info = self._info(game, self._adapter.outcome(self._observation))
        if self._observation.done:
            self._end_episode()
            return [], info[Info.SCORE], True, False, info
        return self._adapter.messages(self._observation), 0.0, False, False, info

    def finish(self) -> tuple[float, ScoreInfo]:
        """End an episode the env runner stopped: its last observation rated (no call to the server)."""
        game = self._episode_problem("finish")
        info = self._info(game, self._adapter.outcome(self._observation))
        self._end_episode()
        return float(info[Info.SCORE]), info

    def score(self, problem: ServerGame, completion: str) -> ScoreResult:
        raise NotImplementedError(
            "OpenEnvEnv's server rates the moves of an episode (reset, step), not a completion on its own: "
            "score_many is not available"
        )

    def close(self) -> None:
        """End the episode in progress, and stop the server if this environment started it (not a twin)."""
        self._end_episode()
        if self._owns_server:
            self._server.close()

    def _call(self, request):
        """``request()`` with a free slot; after a failure, the session is closed and, when the server could not
        be reached, it is checked (and restarted) before the next episode uses it."""
        with self._slots:
            try:
                return request()
            except EnvFailure as failure:
                self._end_episode()
                if failure.kind == SERVER_DOWN:
                    self._server.suspect()
                raise

    def _play(self, move: Callable[[ServerSession], dict[str, Any]]) -> Any:
        """The observation the server answers to ``move`` on this episode's session, as the adapter's type (its
        ``reward`` and ``done`` put back in)."""
        session = self._session
        payload = self._call(lambda: move(session))
        fields = {**payload["observation"], "reward": payload.get("reward"), "done": payload.get("done", False)}
        try:
            return self._adapter.observation_type.model_validate(fields)
        except pydantic.ValidationError as error:
            self._end_episode()
            raise EnvFailure(
                MALFORMED,
                f"{session.url} answered an observation that is not a {self._adapter.observation_type.__name__}: "
                f"{error}",
            ) from None

    def _end_episode(self) -> None:
        """Close the episode's session: the game is over, or cannot go on after a failure."""
        self._current = None
        if self._session is not None:
            self._session.close()
            self._session = None

    def __del__(self):
        # A twin the env runner gave up on (its call timed out) still holds its connection.
        if getattr(self, "_session", None) is not None:
            self._session.close()


def _server(settings: Mapping[str, Any]) -> LocalServer | RunningServer:
    """The server the settings name, checked (not started: that waits for the first reset)."""
    command, url, shared = settings["server_command"], settings["url"], settings["share_server"]
    if (command is None) == (url is None):
        raise ValueError(
            "OpenEnvEnv needs exactly one of 'server_command' (a server to run here) and 'url' (one running), "
            f"got server_command={command!r}, url={url!r}"
        )
    if not isinstance(shared, bool):
        raise TypeError(f"OpenEnvEnv 'share_server' must be True or False, got {shared!r}")
    if url is not None:
        if not (isinstance(url, str) and url.startswith(("http://", "https://"))):
            raise ValueError(f"OpenEnvEnv 'url'={url!r}; expected 'http://host:port' or 'https://...'")
        if shared:
            raise ValueError("OpenEnvEnv 'share_server' applies to 'server_command' only, not to 'url'")
        return RunningServer(url)
    if not (
        isinstance(command, Sequence)
        and not isinstance(command, str)
        and command
        and all(isinstance(part, str) for part in command)
        and any("{port}" in part for part in command)
    ):
        raise ValueError(
            f"OpenEnvEnv 'server_command'={command!r}; expected a list of str with '{{port}}' where the port goes, "
            "e.g. ['python', '-m', 'envs.openenv_servers.guess_number', '--port', '{port}']"
        )
    if shutil.which(command[0]) is None:
        raise ValueError(f"OpenEnvEnv 'server_command': program {command[0]!r} not found")
    return LocalServer(command, startup_timeout_s=_positive(settings, "startup_timeout_s"), shared=shared)


def _positive(settings: Mapping[str, Any], key: str) -> float:
    value = settings[key]
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(f"OpenEnvEnv {key!r}={value!r}; expected a positive number of seconds")
    return float(value)


def _positive_int(settings: Mapping[str, Any], key: str) -> int:
    value = settings[key]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"OpenEnvEnv {key!r}={value!r}; expected a positive int")
    return int(value)
