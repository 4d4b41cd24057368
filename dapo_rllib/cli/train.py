"""Training runs the way RLlib's removed `rllib train file` ran them, for any AlgorithmConfig.

A run goes either in process (`no_tune=True`: build the algorithm, call `train()` until a stop
criterion is met) or as a Ray Tune experiment (one trial per sample of the config's search
space). Both write into `<storage_path>/<name>`: checkpoints, DAPO's TensorBoard event files
and its plot. `storage_path` is a local (or shared) directory or a URI that pyarrow opens
(`s3://...`, `gs://...`): Tune gets a URI unchanged; an in-process run writes into a local copy
of the run directory and uploads it (each checkpoint when saved, the rest at the end). The
run ends with a table of trials and, for DAPO, the line

    validation <data source>/avg@n: <before training> -> <after training>
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import runpy
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import ray
from ray import tune
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, EPISODE_RETURN_MEAN, EVALUATION_RESULTS
from ray.tune.result import TRAINING_ITERATION, TRIAL_ID
from ray.tune.search.sample import Domain
from ray.tune.utils import flatten_dict

from dapo_rllib.algorithm.checkpoints import check_checkpoint_algorithm, refuse_another_algorithms_checkpoint
from dapo_rllib.algorithm.dapo import DAPOConfig
from dapo_rllib.algorithm.setting_names import close_names
from dapo_rllib.columns import Metrics
from dapo_rllib.paths import input_path, is_uri, output_path
from dapo_rllib.reporting.plot import find_runs, plot_run
from dapo_rllib.reporting.progress import IterationSummary, lookup, summary_line
from dapo_rllib.reporting.tables import format_table
from dapo_rllib.reporting.tensorboard import EVAL_BEFORE_TRAINING, TensorBoardCallback

logger = logging.getLogger(__name__)

# Flattened result key (Tune's "/" delimiter) of the mean episode return.
EPISODE_RETURN = f"{ENV_RUNNER_RESULTS}/{EPISODE_RETURN_MEAN}"


@dataclass
class TrainOptions:
    """The options of `rllib train file` and of a tuned example's command line (:func:`add_train_options`)."""

    stop: dict[str, float]
    config_overrides: dict[str, Any] | None = None
    storage_path: str = "runs"
    name: str | None = None
    checkpoint_freq: int = 0
    checkpoint_at_end: bool = True
    num_samples: int = 1
    no_tune: bool = False
    restore: str | None = None
    num_cpus: int | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace, stop: dict[str, float] | None) -> TrainOptions:
        """The parsed :func:`add_train_options`, with `stop` (the config file's) unless --stop replaces it."""
        options = {k: v for k, v in vars(args).items() if k in cls.__dataclass_fields__}
        return cls(**options | {"stop": args.stop or stop})


def json_dict(text: str) -> dict:
    """argparse type of the options that take a JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(
            f"not JSON ({e}): {text!r}; expected e.g. '{{\"training_iteration\": 20}}'"
        ) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object like '{{\"training_iteration\": 20}}', got {text!r}")
    return value


def add_train_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Options shared by `rllib train file` and `python <tuned example>`."""
    parser.add_argument(
        "--stop",
        type=json_dict,
        default=None,
        help="stop criteria as JSON, e.g. '{\"training_iteration\": 20}' (default: the file's `stop`)",
    )
    parser.add_argument(
        "--config",
        dest="config_overrides",
        type=json_dict,
        default=None,
        help='settings that replace the file\'s, as JSON, e.g. \'{"lr": 1e-5, "num_env_runners": 0}\'',
    )
    parser.add_argument(
        "--no-tune", action="store_true", help="train in this process instead of as a Ray Tune experiment"
    )
    parser.add_argument(
        "--storage-path",
        type=output_path,
        default="runs",
        help="parent directory of the run directory: a path every node can reach, or a URI such as s3://bucket/runs (default: ./runs)",
    )
    parser.add_argument("--name", default=None, help="run (experiment) name; default <Algorithm>_<date>_<time>")
    parser.add_argument(
        "--checkpoint-freq", type=int, default=0, help="save a checkpoint every N iterations (0: never)"
    )
    parser.add_argument(
        "--checkpoint-at-end",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="save a checkpoint when the run stops (default: on)",
    )
    parser.add_argument(
        "--num-samples",
        type=int,
        default=1,
        help="Tune: samples of the config's search space (each grid point this many times)",
    )
    parser.add_argument(
        "--restore",
        type=input_path,
        default=None,
        help="checkpoint (directory or URI) to resume from: iteration counter, weights, optimizer, data position",
    )
    parser.add_argument("--num-cpus", type=int, default=None, help="CPUs Ray may use (default: all)")
    return parser


@dataclass
class TrialOutcome:
    """One trial's row in the final table."""

    name: str
    params: dict[str, Any]
    iterations: int
    logdir: str
    checkpoint: str | None
    last: dict[str, Any] = field(default_factory=dict)  # last value of every flattened metric

    @property
    def eval_before(self) -> dict[str, float]:
        """{"<data source>/avg@n": value} of the validation before training (and "<data source>/tool_use" and
        "<data source>/first_answer_acc" where the episodes have turns, a game's "<game>/elo[/<opponent>]")."""
        return self._validation(EVAL_BEFORE_TRAINING)

    @property
    def eval_after(self) -> dict[str, float]:
        """{"<data source>/avg@n": value} of the last validation (and tool_use, first_answer_acc)."""
        return self._validation(EVALUATION_RESULTS)

    def _validation(self, section: str) -> dict[str, float]:
        prefix = section + "/"
        return {
            k.removeprefix(prefix): v
            for k, v in self.last.items()
            if k.startswith(prefix)
            and (
                k.rsplit("/", 1)[-1].startswith(Metrics.AVG_AT)
                or k.rsplit("/", 1)[-1] in (Metrics.TOOL_USE, Metrics.FIRST_ANSWER_ACC)
                or Metrics.ELO in k.split("/")  # a game's Elo ratings: "<game>/elo", "<game>/elo/<opponent>"
            )
        }


class ConfigFile(NamedTuple):
    """What a train file defines: `config` (an AlgorithmConfig), optionally `stop` (a dict) and
    `after_run(outcomes, run_dir)`, called when the run has ended (e.g. to write a report into the
    run directory)."""

    config: AlgorithmConfig
    stop: dict | None = None
    after_run: Callable[[list[TrialOutcome], Path], Any] | None = None


def load_config_file(path: str | Path) -> ConfigFile:
    """`config`, and the optional `stop` and `after_run`, defined by a Python file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {str(path)!r} does not exist")
    # Not "__main__": the file's own command-line entry point must not run.
    namespace = runpy.run_path(str(path), run_name="__rllib_train_file__")
    config = namespace.get("config")
    if not isinstance(config, AlgorithmConfig):
        raise ValueError(f"{str(path)!r} must define an AlgorithmConfig named `config`; found {type(config).__name__}")
    stop = namespace.get("stop")
    if stop is not None and not isinstance(stop, dict):
        raise ValueError(f"`stop` in {str(path)!r} must be a dict like {{'training_iteration': 20}}, got {stop!r}")
    after_run = namespace.get("after_run")
    if after_run is not None and not callable(after_run):
        raise ValueError(f"`after_run` in {str(path)!r} must be a function (outcomes, run_dir), got {after_run!r}")
    return ConfigFile(config, stop, after_run)


def _exists(path: str) -> bool:
    import pyarrow.fs

    if not is_uri(path):
        return Path(path).is_dir()
    fs, fs_path = pyarrow.fs.FileSystem.from_uri(path)
    return fs.get_file_info(fs_path).type == pyarrow.fs.FileType.Directory


def upload(local_path: Path, uri: str) -> None:
    """Copy a local file or directory to `uri` (s3://, gs://, file://, ...)."""
    import pyarrow.fs

    pyarrow.fs.copy_files(str(local_path), uri)


def local_checkpoint(path: str) -> str:
    """`path`, or for a URI a copy downloaded to a local temporary directory: RLlib hands a
    checkpoint to learner actors on other machines by copying a local directory between nodes
    (`sync_dir_between_nodes`), which a URI is not."""
    if not is_uri(path):
        return path
    import pyarrow.fs

    local = tempfile.mkdtemp(prefix="dapo_rllib_restore_")
    pyarrow.fs.copy_files(path, local)
    return local


def search_space_keys(config: AlgorithmConfig) -> list[str]:
    """Settings of `config` that Tune samples (grid_search, choice, ...)."""
    return [
        k for k, v in config.to_dict().items() if isinstance(v, Domain) or (isinstance(v, dict) and "grid_search" in v)
    ]


def train(
    config: AlgorithmConfig, opts: TrainOptions, after_run: Callable[[list[TrialOutcome], Path], Any] | None = None
) -> list[TrialOutcome]:
    """Run `config` until `opts.stop`; print the trial table and where everything went, then
    call `after_run(outcomes, run_dir)` (a train file's, see `ConfigFile`)."""
    if not opts.stop:
        raise ValueError(
            "no stop criteria: pass --stop '{\"training_iteration\": N}' or define `stop` in the config file"
        )
    if opts.restore is not None and not _exists(opts.restore):
        raise FileNotFoundError(f"checkpoint to restore {opts.restore!r} does not exist")
    if opts.config_overrides:
        config = with_overrides(config, opts.config_overrides)
    if opts.restore is not None and not is_uri(opts.restore):
        # Before Ray starts: another algorithm's checkpoint would fail deep in restore_from_path.
        _check_restore(opts.restore, config.algo_class)
    name = opts.name or f"{config.algo_class.__name__}_{time.strftime('%Y%m%d_%H%M%S')}"
    # A URI goes to Tune (and to the upload of an in-process run) unchanged; the driver writes
    # its own files (in-process checkpoints and TensorBoard files, trials.json, the plot) into
    # a local run directory, which for a URI is a staging copy uploaded to `remote`.
    storage = opts.storage_path.rstrip("/") if is_uri(opts.storage_path) else str(Path(opts.storage_path).resolve())
    remote = f"{storage}/{name}" if is_uri(storage) else None
    run_dir = Path(tempfile.gettempdir()) / "dapo_rllib_runs" / name if remote else Path(storage) / name
    ray.init(num_cpus=opts.num_cpus, ignore_reinit_error=True, include_dashboard=False)
    searched = search_space_keys(config)
    with _removed_if_unwritten(run_dir):
        if opts.no_tune:
            if searched or opts.num_samples != 1:
                raise ValueError(
                    f"--no-tune trains one config; the search space over {searched} (num_samples={opts.num_samples}) needs Ray Tune (drop --no-tune)"
                )
            outcomes = [_train_in_process(config, opts, run_dir, remote)]
        else:
            outcomes = _train_with_tune(config, opts, storage, name, searched)
    print_report(outcomes, searched, run_dir, remote)
    if after_run is not None:
        after_run(outcomes, run_dir)
    if remote:
        # Checkpoints went up when saved.
        for item in run_dir.iterdir():
            if not item.name.startswith("checkpoint_"):
                upload(item, f"{remote}/{item.name}")
    return outcomes


@contextmanager
def _removed_if_unwritten(run_dir: Path):
    """A run that fails before writing anything into `run_dir` leaves no empty run directory behind (one it
    wrote into stays, for its logs and checkpoints)."""
    try:
        yield
    except BaseException:
        if run_dir.is_dir() and not any(path.is_file() for path in run_dir.rglob("*")):
            shutil.rmtree(run_dir)
        raise


def with_overrides(config: AlgorithmConfig, overrides: dict[str, Any]) -> AlgorithmConfig:
    """A copy of `config` with `overrides` applied; unknown setting names are an error."""
    unknown = sorted(k for k in overrides if not hasattr(config, k))
    if unknown:
        public = [name for name in vars(config) if not name.startswith("_")]
        close = {name: close_names(name, public) for name in unknown}
        raise ValueError(f"--config names unknown settings of {type(config).__name__} (with close ones): {close}")
    return config.copy(copy_frozen=False).update_from_dict(overrides)


def _is_dapo(config: AlgorithmConfig) -> bool:
    return isinstance(config, DAPOConfig)


def _train_in_process(
    config: AlgorithmConfig, opts: TrainOptions, run_dir: Path, remote: str | None = None
) -> TrialOutcome:
    run_dir.mkdir(parents=True, exist_ok=True)
    config = config.copy(copy_frozen=False)
    if _is_dapo(config):
        config.reporting(tensorboard_dir=str(run_dir))
    logger.info("building %s ...", getattr(config.algo_class, "NAME", config.algo_class.__name__))
    algo = config.build_algo()
    if opts.restore:
        _restore(algo, opts.restore)
        logger.info("resumed from %s at iteration %s", opts.restore, algo.iteration)
    last: dict[str, Any] = {}
    checkpoint = None
    try:
        while True:
            result = algo.train()
            last.update(_reported(flatten_dict(result)))
            logger.info("%s", summary_line(result))
            iteration = result[TRAINING_ITERATION]
            done = _stop_reached(result, opts.stop)
            if (opts.checkpoint_freq and iteration % opts.checkpoint_freq == 0) or (done and opts.checkpoint_at_end):
                checkpoint = str(run_dir / f"checkpoint_{iteration:06d}")
                algo.save_to_path(checkpoint)
                if remote:
                    upload(Path(checkpoint), f"{remote}/{Path(checkpoint).name}")
                    checkpoint = f"{remote}/{Path(checkpoint).name}"
                logger.info("checkpoint: %s", checkpoint)
            if done:
                break
        if _is_dapo(config) and EVALUATION_RESULTS not in result:
            # The stop came between evaluation_interval ticks: the user still wants the final number.
            final = algo.evaluate()
            algo.log_evaluation(final)
            last.update(flatten_dict({EVALUATION_RESULTS: final}))
    finally:
        algo.stop()
    return TrialOutcome(
        name=run_dir.name,
        params={},
        iterations=iteration,
        logdir=remote or str(run_dir),
        checkpoint=checkpoint,
        last=last,
    )


def _reported(flat: dict[str, Any]) -> dict[str, Any]:
    """Metrics that have a value (RLlib reports one not logged this iteration as NaN)."""
    return {k: v for k, v in flat.items() if v is not None and not (isinstance(v, float) and math.isnan(v))}


def _stop_reached(result: dict, stop: dict[str, float]) -> bool:
    """Tune's rule: stop as soon as any criterion's metric reaches its value."""
    for key, threshold in stop.items():
        value = lookup(result, key)
        if value is None:
            raise ValueError(f"stop criterion {key!r} is not in the training results; top-level keys: {sorted(result)}")
        if value >= threshold:
            return True
    return False


def _check_restore(checkpoint: str, algo_class: Any) -> None:
    """Refuse a checkpoint that is not one of `algo_class` (the run's algorithm; for the DAPO
    family, written by that very algorithm) or not a checkpoint."""
    if isinstance(algo_class, type):
        refuse_another_algorithms_checkpoint(checkpoint, algo_class)
        check_checkpoint_algorithm(checkpoint, algo_class, f"resuming a {algo_class.__name__} run (--restore)")


def _restore(algorithm, checkpoint: str) -> None:
    """Restore `algorithm` from `checkpoint` (a directory or URI), checked to be one of its kind."""
    local = local_checkpoint(checkpoint)
    # The config's class: in a Tune trial, type(algorithm) is Ray's actor subclass of it.
    _check_restore(local, algorithm.config.algo_class)
    algorithm.restore_from_path(local)


def _restore_on_init(checkpoint: str, algorithm, **kwargs) -> None:
    _restore(algorithm, checkpoint)  # in the trial, on whichever node


def _train_with_tune(
    config: AlgorithmConfig, opts: TrainOptions, storage: str, name: str, searched: list[str]
) -> list[TrialOutcome]:
    if opts.restore:
        restore = opts.restore if is_uri(opts.restore) else str(Path(opts.restore).resolve())
        config = config.copy(copy_frozen=False).callbacks(on_algorithm_init=partial(_restore_on_init, restore))
    tuner = tune.Tuner(
        config.algo_class,
        param_space=config,
        tune_config=tune.TuneConfig(num_samples=opts.num_samples),
        run_config=tune.RunConfig(
            name=name,
            storage_path=storage,
            stop=opts.stop,
            checkpoint_config=tune.CheckpointConfig(
                checkpoint_frequency=opts.checkpoint_freq, checkpoint_at_end=opts.checkpoint_at_end
            ),
            callbacks=[IterationSummary(), TensorBoardCallback()],
            verbose=1,
        ),
    )
    outcomes = []
    for result in tuner.fit():
        if result.error:
            logger.info("trial %s failed: %s", Path(result.path).name, result.error)
        frame = result.metrics_dataframe
        last = {}
        if frame is not None:
            last = _reported({col: frame[col].dropna().iloc[-1] for col in frame.columns if frame[col].notna().any()})
        outcomes.append(
            TrialOutcome(
                name=str(last.get(TRIAL_ID, Path(result.path).name)),
                params={k: result.config.get(k) for k in searched},
                iterations=int(last.get(TRAINING_ITERATION, 0)),
                logdir=_as_uri(result.path, storage),
                checkpoint=_as_uri(result.checkpoint.path, storage) if result.checkpoint else None,
                last=last,
            )
        )
    return outcomes


def _as_uri(fs_path: str, storage: str) -> str:
    """Tune's result paths drop the URI scheme ("bucket/runs/..."): put the storage's back."""
    return f"{storage.split('://', 1)[0]}://{fs_path}" if is_uri(storage) else fs_path


def print_report(outcomes: list[TrialOutcome], searched: list[str], run_dir: Path, remote: str | None = None) -> None:
    """The trial table, the eval accuracy line, and where logs, plot and checkpoints went
    (`run_dir`: the local run directory; `remote`: the URI it is uploaded to, if any)."""
    validated = sorted({name for o in outcomes for name in o.eval_before | o.eval_after})
    columns = [
        "trial",
        *searched,
        "iters",
        *(f"{name} {when}" for name in validated for when in ("before", "after")),
        "episode return",
    ]
    rows = [
        [
            o.name,
            *(o.params.get(k) for k in searched),
            o.iterations,
            *(values.get(name) for name in validated for values in (o.eval_before, o.eval_after)),
            o.last.get(EPISODE_RETURN),
        ]
        for o in outcomes
    ]
    print("\n" + format_table([columns, *rows]))
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "trials.json").write_text(
        json.dumps(
            [o.__dict__ | {"last": {k: _jsonable(v) for k, v in o.last.items()}} for o in outcomes],
            indent=1,
            default=str,
        )
    )
    print()
    print(f"run directory:  {remote or run_dir}  (trial table: trials.json)")
    # Tune trials' event files went to the storage path (Tune syncs them there), an in-process
    # run's are in run_dir (uploaded next, for a URI).
    if any(run_dir.rglob("events.out.tfevents.*")) or (remote and any(o.logdir != remote for o in outcomes)):
        print(f"TensorBoard:    tensorboard --logdir {remote or run_dir}")

    if find_runs(run_dir):  # DAPO runs; other algorithms have no DAPO curves to draw
        print(f"plot:           {plot_run(run_dir)}")
    for o in outcomes:
        if o.checkpoint:
            print(f"checkpoint:     {o.checkpoint}")
    if len(outcomes) == 1:
        before, after = outcomes[0].eval_before, outcomes[0].eval_after
        for name in validated:
            if name in before and name in after:
                print(f"validation {name}: {before[name]:.3f} -> {after[name]:.3f}")


def _jsonable(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def run_example(
    config: AlgorithmConfig, stop: dict[str, float], after_run: Callable[[list[TrialOutcome], Path], Any] | None = None
) -> list[TrialOutcome]:
    """Entry point of a tuned example file: `python <file> [train options]`."""
    parser = argparse.ArgumentParser(description="Train this tuned example (options as for `rllib train file`).")
    return train(config, TrainOptions.from_args(add_train_options(parser).parse_args(), stop), after_run)
