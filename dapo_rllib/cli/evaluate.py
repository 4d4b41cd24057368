"""`rllib evaluate`: validation numbers the way the DAPO paper reports them.

    rllib evaluate <HF model dir | DAPO checkpoint> --data ../shared/data/aime-2024.parquet

samples n completions of every problem with vLLM (the evaluation settings: temperature 1.0,
top_p 0.7 by default) on one in-process `VLLMEnvRunner`, scores them with the data source's
scorer, and reports per data source avg@n, pass@k, maj@n, mean response length, truncation
ratio and scoring timeouts (`dapo_rllib.reporting.eval_metrics`): a table on the terminal and a JSON file
with every number, including each problem's.

Repeated rows count once: the AIME 2024 file holds 30 problems x 32 copies, which loads as 30
problems, and n defaults to the number of copies (32), so "avg@32 over the file's 960 rows" and
"32 samples of each unique problem" are the same number. A DAPO checkpoint's policy is exported
to a temporary Hugging Face directory first (no learner is built); its config supplies the
defaults, the run's validation settings (samples per problem, response length, temperature, top_p;
seed), so that the numbers compare with the run's own, and a line says which it took. Other algorithms' checkpoints go through
`Algorithm.evaluate`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from ray.tune.utils import flatten_dict

from dapo_rllib.algorithm.checkpoints import (
    CTOR_FILE,
    build_with_policy,
    checkpoint_config,
    is_checkpoint,
)
from dapo_rllib.algorithm.dapo import DAPOConfig
from dapo_rllib.algorithm.export import export_hf_model_from_checkpoint
from dapo_rllib.columns import Metrics
from dapo_rllib.contracts import EvalRecord
from dapo_rllib.models.packaged import PACKAGED_MODELS
from dapo_rllib.models.resolve import ensure_model_directory, is_model_file_source
from dapo_rllib.models.rl_module import merge_adapter_directory
from dapo_rllib.reporting import eval_metrics
from dapo_rllib.reporting.tables import format_table
from dapo_rllib.rollout.env_runner import VLLMEnvRunner
from dapo_rllib.rollout.game_loop import RANDOM_SCRIPT
from dapo_rllib.tasks.data import load_math_dataset
from dapo_rllib.tasks.data.code_tasks import is_code_task_file
from dapo_rllib.tasks.data.env_rows import env_of_data_file
from dapo_rllib.tasks.env_names import CODE_ENV

logger = logging.getLogger(__name__)

# Reference lengths (docs/design/algorithm.md §5), cut to the model's context when it is shorter.
REFERENCE_PROMPT_LENGTH = 2048
REFERENCE_RESPONSE_LENGTH = 20480


def evaluate(
    model: str | Path,
    *,
    data: str | None = None,
    num_samples: int | None = None,
    max_problems: int | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    scorer: str | None = None,
    score_timeout_s: float | None = None,
    max_prompt_length: int | None = None,
    max_response_length: int | None = None,
    dtype: str | None = None,
    vllm_engine_kwargs: dict | None = None,
    out: str | Path | None = None,
) -> dict[str, Any]:
    """Evaluate a Hugging Face model directory or an algorithm checkpoint; see the module doc.

    Arguments left None come from the checkpoint's config (or DAPO's defaults for a model
    directory). `scorer` selects the scorer for every data source ("math_dapo", "math_verify",
    or "module:function"); `score_timeout_s` bounds scoring one sample (a sample that runs out
    of time is wrong, and counted in `scoring_timeouts`). Returns what is written to the JSON file (`out`, by default under
    ./eval_results/).
    """

    model = Path(model)
    dapo_options = dict(
        data=data,
        num_samples=num_samples,
        max_problems=max_problems,
        temperature=temperature,
        top_p=top_p,
        scorer=scorer,
        score_timeout_s=score_timeout_s,
        max_prompt_length=max_prompt_length,
        max_response_length=max_response_length,
        dtype=dtype,
        vllm_engine_kwargs=vllm_engine_kwargs,
    )
    if is_checkpoint(model):
        config = checkpoint_config(model)
        if not isinstance(config, DAPOConfig):
            given = sorted(k for k, v in dapo_options.items() if v is not None)
            if given:
                raise ValueError(
                    f"{given} apply to DAPO checkpoints and model directories; {str(model)!r} is a {config.algo_class.__name__} checkpoint"
                )
            return evaluate_algorithm_checkpoint(model, out=out)
        # The run's validation settings unless given, so that the numbers compare with the run's own (its
        # samples per problem over the file's copies too).
        print(_run_settings_line(config, dapo_options), flush=True)
        dapo_options["num_samples"] = num_samples or config.eval_num_samples
        with tempfile.TemporaryDirectory(prefix="dapo_eval_") as exported:
            logger.info("exporting the policy of %s ...", model)
            config.training(model_path=str(export_hf_model_from_checkpoint(model, exported)), lora_rank=None)
            return _evaluate_dapo(config, model, out=out, **dapo_options)
    if (
        is_model_file_source(str(model))
        or (model / "config.json").is_file()
        or (model / "adapter_config.json").is_file()
    ):
        if data is None:
            raise ValueError(
                f"--data is required to evaluate the model {str(model)!r} (a DAPO-format .parquet/.jsonl file, or 'arithmetic')"
            )
        if is_model_file_source(str(model)):  # a GGUF file or a packaged model: its (cached) conversion
            return _evaluate_model_directory(ensure_model_directory(str(model)), model, out=out, **dapo_options)
        if (model / "config.json").is_file():
            return _evaluate_model_directory(model, model, out=out, **dapo_options)
        # A PEFT adapter (`rllib export` of a LoRA run): merged into the base model its config names.
        with tempfile.TemporaryDirectory(prefix="dapo_eval_") as merged:
            logger.info("merging the adapter %s into its base model ...", model)
            merged = merge_adapter_directory(model, merged, dtype or "float32")
            return _evaluate_model_directory(merged, model, out=out, **dapo_options)
    raise FileNotFoundError(
        f"{str(model)!r} is neither a Hugging Face model directory (config.json), a GGUF file, a packaged model "
        f"({', '.join(sorted(PACKAGED_MODELS))}) nor an RLlib checkpoint "
        f"({CTOR_FILE}){': it does not exist' if not model.exists() else ''}; "
        "expected e.g. runs/<run>/checkpoint_000040 or a save_pretrained directory"
    )


def _run_settings_line(config, options: dict[str, Any]) -> str:
    """Which settings a checkpoint's evaluation takes from its run (those not given on the command line)."""
    taken = {
        "num_samples": f"{config.eval_num_samples} samples per problem (--num-samples)",
        "max_response_length": f"responses up to {config.max_response_length} tokens (--max-response-length)",
        "temperature": f"temperature {config.eval_temperature} (--temperature)",
        "top_p": f"top_p {config.eval_top_p} (--top-p)",
    }
    from_run = [line for name, line in taken.items() if options[name] is None]
    return "settings of the checkpoint's run: " + (", ".join(from_run) or "none (all given)")


def _evaluate_model_directory(
    model_dir: Path, label: Path, *, out, data, max_prompt_length, max_response_length, **options
):
    """Evaluate the Hugging Face model in ``model_dir``, reported under ``label`` (what the user gave)."""

    prompt, response = _lengths_for(model_dir, max_prompt_length, max_response_length)
    config = DAPOConfig().training(model_path=str(model_dir))
    if is_code_task_file(data):  # HumanEval, MBPP, LiveCodeBench or code-task rows: judged in the sandbox
        config.environment(env=CODE_ENV)
    elif env_of_data_file(data):  # an environment's own rows (`rllib data convert env:NAME`): read back by it
        config.environment(env=env_of_data_file(data))
    return _evaluate_dapo(
        config, label, out=out, data=data, max_prompt_length=prompt, max_response_length=response, **options
    )


def _lengths_for(model_dir: Path, prompt: int | None, response: int | None) -> tuple[int, int]:
    """Prompt and response limits for a model directory: given, or the reference ones fitted to its context."""
    from transformers import AutoConfig

    context = (
        getattr(AutoConfig.from_pretrained(model_dir), "max_position_embeddings", None)
        or REFERENCE_PROMPT_LENGTH + REFERENCE_RESPONSE_LENGTH
    )
    prompt = prompt or min(REFERENCE_PROMPT_LENGTH, context // 2)
    response = response or min(REFERENCE_RESPONSE_LENGTH, context - prompt)
    if prompt + response > context:
        raise ValueError(
            f"max_prompt_length={prompt} + max_response_length={response} exceed the context of {str(model_dir)!r} ({context} tokens)"
        )
    return prompt, response


def _evaluate_dapo(config, model: Path, *, out, data, num_samples, **options) -> dict[str, Any]:
    """Evaluate the policy `config` names with the evaluation settings given (None: the config's)."""
    config, data = _evaluation_config(config, data=data, num_samples=num_samples, **options)
    settings = _settings_report(config, model, data)
    num_samples = config.eval_num_samples
    logger.info(
        "evaluating %s on %s: %s samples per problem, temperature %s, top_p %s",
        model,
        data,
        num_samples,
        config.eval_temperature,
        config.eval_top_p,
    )
    start = time.perf_counter()
    runner = VLLMEnvRunner(config=config)
    try:
        records = runner.evaluate(num_samples=num_samples, max_problems=config.eval_max_problems, progress=True)
    finally:
        runner.stop()
    metrics = eval_metrics.summarize(records, elo_anchor=RANDOM_SCRIPT)
    # Prompts over max_prompt_length were left-truncated: reported, not hidden.
    prompts_truncated = sum(r.prompt_truncated for r in records)
    report = {
        "settings": settings,
        "metrics": metrics,
        Metrics.PROMPTS_TRUNCATED: prompts_truncated,
        Metrics.EVAL_TIME_S: time.perf_counter() - start,
        "problems": [dataclasses.asdict(ProblemSummary.of(r)) for r in records],
    }
    out = (
        Path(out)
        if out is not None
        else Path("eval_results") / f"{_label(model)}__{Path(str(data)).stem}__n{num_samples}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, ensure_ascii=False))
    print_table(metrics)
    _print_scorer(settings["scorer"], metrics)
    _print_caveats(records, prompts_truncated, config.max_prompt_length)
    print(f"\nresults (every number, per problem too): {out}", flush=True)
    return report


def _evaluation_config(
    config,
    *,
    data,
    num_samples,
    max_problems,
    temperature,
    top_p,
    scorer,
    score_timeout_s,
    max_prompt_length,
    max_response_length,
    dtype,
    vllm_engine_kwargs,
):
    """A validated copy of `config` with the evaluation settings given, for one in-process
    runner, and the data it evaluates on."""
    config = config.copy(copy_frozen=False)
    data = data or config.eval_dataset or config.evaluation_env_config().get("dataset")
    num_samples = num_samples or _copies_per_problem(data) or config.eval_num_samples
    config.evaluation(
        eval_dataset=data,
        eval_num_samples=num_samples,
        eval_max_problems=_given(max_problems, config.eval_max_problems),
        eval_temperature=_given(temperature, config.eval_temperature),
        eval_top_p=_given(top_p, config.eval_top_p),
    )
    config.training(
        max_prompt_length=_given(max_prompt_length, config.max_prompt_length),
        max_response_length=_given(max_response_length, config.max_response_length),
        # Validation scores correctness only: no overlong shaping to configure.
        overlong_buffer_len=0,
        model_dtype=_given(dtype, config.model_dtype),
        vllm_engine_kwargs=config.vllm_engine_kwargs | (vllm_engine_kwargs or {}),
    )
    scoring = {"scorer": scorer, "score_timeout_s": score_timeout_s}
    config.environment(env_config=config.env_config | {k: v for k, v in scoring.items() if v is not None})
    config.env_runners(num_env_runners=0)
    config.validate()
    return config, data


def _settings_report(config, model: Path, data) -> dict[str, Any]:
    """The report's "settings": what the numbers were measured with."""
    return {
        "model": str(model),
        "data": str(data),
        "num_samples": config.eval_num_samples,
        "max_problems": config.eval_max_problems,
        "temperature": config.eval_temperature,
        "top_p": config.eval_top_p,
        "max_prompt_length": config.max_prompt_length,
        "max_response_length": config.max_response_length,
        "scorer": config.evaluation_env_config().get("scorer"),
        "score_timeout_s": config.evaluation_env_config().get("score_timeout_s"),
        "seed": config.seed,
    }


def _print_scorer(choice, metrics: dict[str, Any]) -> None:
    """A scorer the user chose, named under the table: its rows are named after the problems' data_source (the
    rows' field, `math_dapo` unless `rllib data convert --data-source` named it), which reads like a scorer's."""
    if choice is not None:
        print(
            f"\nscored by {choice!r}; the table's rows are the problems' data sources ({', '.join(metrics)}), "
            "which rllib data convert --data-source NAME sets",
            flush=True,
        )


def _print_caveats(records: list[EvalRecord], prompts_truncated: int, max_prompt_length: int) -> None:
    """What the table's numbers do not show: truncated prompts, problems with broken tests."""
    if prompts_truncated:
        print(
            f"\n{prompts_truncated} of {len(records)} prompts were longer than max_prompt_length={max_prompt_length} tokens and were left-truncated",
            flush=True,
        )
    if broken := [r for r in records if r.broken_task]:
        print(
            f"\n{len(broken)} problems have broken tests (scored wrong whatever the answer), e.g. "
            f"problem {broken[0].problem_index}: {broken[0].broken_task}",
            flush=True,
        )


def _given(value, default):
    return default if value is None else value


def _copies_per_problem(data) -> int | None:
    """How many times each problem appears in `data`, when it is the same for all and > 1."""

    if not Path(str(data)).is_file():
        return None
    copies = {problem.copies for problem in load_math_dataset(data)}
    if len(copies) == 1 and (n := copies.pop()) > 1:
        logger.info("each problem appears %d times in %s: evaluating %d samples of each unique problem", n, data, n)
        return n
    return None


def _label(model: Path) -> str:
    """A file name part for a model: '<run>_<checkpoint>' for checkpoints, else the directory name."""
    model = model.resolve()
    return f"{model.parent.name}_{model.name}" if is_checkpoint(model) else model.name


@dataclasses.dataclass(frozen=True)
class ProblemSummary:
    """One problem's entry in the report's "problems"."""

    problem_index: int
    data_source: str
    ground_truth: str
    num_correct: int
    num_samples: int
    accuracy: float
    majority_answer: str | None
    majority_correct: bool
    response_length_mean: float
    truncated: int  # samples that hit max_response_length
    scoring_timeouts: int
    broken_task: str  # why the problem's own tests are broken ("": they are not)

    @classmethod
    def of(cls, record: EvalRecord) -> ProblemSummary:
        n = record.n
        return cls(
            problem_index=record.problem_index,
            data_source=record.data_source,
            ground_truth=record.ground_truth,
            num_correct=sum(record.acc),
            num_samples=n,
            accuracy=sum(record.acc) / n,
            majority_answer=eval_metrics.majority_answer(record.pred),
            majority_correct=eval_metrics.majority_correct(record.pred, record.acc),
            response_length_mean=sum(record.length) / n,
            truncated=sum(record.truncated),
            scoring_timeouts=sum(record.timed_out),
            broken_task=record.broken_task,
        )


def print_table(metrics: dict[str, dict[str, float]]) -> None:
    """One row per data source, one column per metric."""
    columns = list(dict.fromkeys(key for source_metrics in metrics.values() for key in source_metrics))
    rows = [[source, *(m.get(c) for c in columns)] for source, m in metrics.items()]
    print("\n" + format_table([["data source", *columns], *rows], align="<" + ">" * len(columns)))


def evaluate_algorithm_checkpoint(checkpoint: Path, *, out: str | Path | None = None) -> dict[str, Any]:
    """Any other RLlib algorithm: `Algorithm.evaluate` as its config sets it up; numbers printed."""
    algo = build_with_policy(checkpoint)
    try:
        results = algo.evaluate()
    finally:
        algo.stop()
    numbers = {k: v for k, v in flatten_dict(results).items() if isinstance(v, (int, float))}
    print(f"evaluation of {checkpoint}\n" + textwrap.indent(format_table(sorted(numbers.items())), "  "))
    if out is not None:
        Path(out).write_text(json.dumps({"checkpoint": str(checkpoint), "results": numbers}, indent=1))
        print(f"results: {out}")
    return results
