"""The `rllib` command, back for Ray 2.60 (which removed RLlib's own) and aware of DAPO.

    rllib train file <python file> [--stop JSON] [--no-tune] [--checkpoint-freq N] ...
    rllib evaluate <model dir | GGUF file | packaged model | checkpoint> --data FILE [--num-samples N] [--out JSON]
    rllib export <checkpoint | GGUF file | packaged model> <out dir>
    rllib doctor <model dir | GGUF file | packaged model> [--dtype D] [--out JSON]
    rllib data convert <problems.jsonl|.parquet|.csv> <out.parquet> [--tokenizer DIR --max-prompt-length N]
    rllib data convert env:<registered env> <out.parquet> --env-config JSON
    rllib plot <run dir> [--out PNG]

`train file` takes any file that defines an AlgorithmConfig named `config` (and optionally a
`stop` dict), as the removed tool did (a file may also define `after_run(outcomes, run_dir)`): DAPO's tuned examples, or a stock PPO CartPole config.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

import dapo_rllib  # noqa: F401  (registers the algorithms and the environments)
from dapo_rllib.algorithm.export import export_hf_model_from_checkpoint
from dapo_rllib.algorithm.setting_names import UnknownSettingError
from dapo_rllib.cli.doctor import add_doctor_arguments, run_doctor_command
from dapo_rllib.cli.evaluate import evaluate
from dapo_rllib.cli.train import TrainOptions, add_train_options, json_dict, load_config_file, train
from dapo_rllib.models.resolve import ensure_model_directory, is_model_file_source
from dapo_rllib.paths import input_path, output_path
from dapo_rllib.reporting.plot import plot_run
from dapo_rllib.tasks.data.convert import add_convert_arguments, run_convert


def _train(args) -> None:
    config, stop, after_run = load_config_file(args.file)
    train(config, TrainOptions.from_args(args, stop), after_run)


def _evaluate(args) -> None:
    options = {k: v for k, v in vars(args).items() if k not in ("command", "func", "model")}
    evaluate(args.model, **options)


def _export(args) -> None:
    if is_model_file_source(args.checkpoint):  # a GGUF file or a packaged model: a copy of its conversion
        out = Path(shutil.copytree(ensure_model_directory(args.checkpoint), args.out_dir))
    else:
        out = export_hf_model_from_checkpoint(args.checkpoint, args.out_dir, merge=args.merge)
    if (out / "adapter_config.json").is_file():
        print(
            f"PEFT adapter directory: {out} (load with PeftModel.from_pretrained over its base model, or rllib evaluate {out})"
        )
    else:
        print(f"Hugging Face model directory: {out} (load with AutoModelForCausalLM.from_pretrained or vllm.LLM)")


def _convert(args) -> None:
    if args.tokenizer is not None and is_model_file_source(args.tokenizer):
        # The model's tokenizer from any source model_path takes: a GGUF file's or packaged model's conversion.
        args.tokenizer = str(ensure_model_directory(args.tokenizer))
    run_convert(args)


def _plot(args) -> None:
    print(f"plot: {plot_run(args.run_dir, args.out)}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rllib",
        description="RLlib's command line (train, evaluate, export, doctor, data, plot), with DAPO registered.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{train,evaluate,export,doctor,data,plot}")
    for add_command in (_add_train, _add_evaluate, _add_export, _add_doctor, _add_data, _add_plot):
        add_command(commands)
    return parser


def _add_train(commands) -> None:
    train = commands.add_parser("train", help="train from a Python config file: rllib train file <file>")
    train_kinds = train.add_subparsers(dest="kind", required=True, metavar="{file}")
    train_file = train_kinds.add_parser("file", help="train the AlgorithmConfig named `config` in a Python file")
    train_file.add_argument(
        "file",
        type=input_path,
        help="Python file defining `config` (an AlgorithmConfig) and optionally `stop` (a dict)",
    )
    add_train_options(train_file).set_defaults(func=_train)


def _add_evaluate(commands) -> None:
    evaluate = commands.add_parser(
        "evaluate", help="validation metrics (avg@n, pass@k, maj@n, ...) of a model directory or checkpoint"
    )
    evaluate.add_argument(
        "model",
        type=input_path,
        help="Hugging Face model directory, or algorithm checkpoint directory (checkpoint_NNNNNN)",
    )
    evaluate.add_argument(
        "--data",
        type=input_path,
        default=None,
        help="DAPO-format .parquet/.jsonl eval file (e.g. ../shared/data/aime-2024.parquet) or 'arithmetic' (default for checkpoints: their eval dataset)",
    )
    evaluate.add_argument(
        "--num-samples",
        type=int,
        default=None,
        help="n, samples per problem (avg@n); default: a checkpoint's run's (eval_num_samples); for a model, the copies of each problem in the file (32 for AIME 2024), else 32",
    )
    evaluate.add_argument("--max-problems", type=int, default=None, help="evaluate the first N problems only")
    evaluate.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="sampling temperature (default: a checkpoint's run's eval_temperature, else 1.0, the paper's)",
    )
    evaluate.add_argument(
        "--top-p",
        type=float,
        default=None,
        help="nucleus sampling (default: a checkpoint's run's, else 0.7, the paper's)",
    )
    evaluate.add_argument(
        "--scorer",
        default=None,
        help="scorer for every data source: math_dapo, math_verify or module:function (default: by data source)",
    )
    evaluate.add_argument(
        "--score-timeout",
        dest="score_timeout_s",
        type=float,
        default=None,
        help="seconds to score one sample before it counts as wrong (default 10)",
    )
    evaluate.add_argument(
        "--max-prompt-length",
        type=int,
        default=None,
        help="prompt tokens, left-truncated (default: the checkpoint's, or 2048 cut to the model's context)",
    )
    evaluate.add_argument(
        "--max-response-length",
        type=int,
        default=None,
        help="generation limit in tokens (default: the checkpoint's, or 20480 cut to the model's context)",
    )
    evaluate.add_argument(
        "--dtype",
        default=None,
        choices=("float32", "bfloat16", "float16"),
        help="vLLM dtype (default: the checkpoint's, or float32)",
    )
    evaluate.add_argument(
        "--vllm-engine-kwargs",
        type=json_dict,
        default=None,
        help="extra vllm.LLM arguments as JSON, e.g. '{\"tensor_parallel_size\": 4}'",
    )
    evaluate.add_argument(
        "--out",
        type=output_path,
        default=None,
        help="JSON results file (default: eval_results/<model>__<data>__n<n>.json)",
    )
    evaluate.set_defaults(func=_evaluate)


def _add_export(commands) -> None:
    export = commands.add_parser(
        "export",
        help="write a DAPO checkpoint's policy, a GGUF file or a packaged model as a Hugging Face model directory",
    )
    export.add_argument(
        "checkpoint",
        type=input_path,
        help="algorithm checkpoint directory, GGUF file, or packaged model (e.g. smollm2-135m-instruct)",
    )
    export.add_argument(
        "out_dir", type=output_path, help="output directory (save_pretrained layout, tokenizer included)"
    )
    export.add_argument(
        "--merge",
        action="store_true",
        help="a LoRA run's policy as a model with the adapters merged in (default: a PEFT adapter directory)",
    )
    export.set_defaults(func=_export)


def _add_doctor(commands) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="pre-flight checks of a model: learner vs vLLM log-probs, weight sync, chat template, EOS, context",
    )
    add_doctor_arguments(doctor)
    doctor.set_defaults(func=run_doctor_command)


def _add_data(commands) -> None:
    data = commands.add_parser("data", help="dataset tools: rllib data convert <in> <out.parquet>")
    data_tools = data.add_subparsers(dest="tool", required=True, metavar="{convert}")
    convert = data_tools.add_parser(
        "convert",
        help="turn a jsonl/parquet/csv file of problems and answers into DAPO rows (deduplicated, templated, parquet)",
    )
    add_convert_arguments(convert)
    convert.set_defaults(func=_convert)


def _add_plot(commands) -> None:
    plot = commands.add_parser("plot", help="draw a DAPO run's curves into one PNG")
    plot.add_argument(
        "run_dir", type=input_path, help="run directory (or Tune experiment directory) with TensorBoard event files"
    )
    plot.add_argument("--out", type=output_path, default=None, help="PNG path (default: <run_dir>/dapo_curves.png)")
    plot.set_defaults(func=_plot)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Modules in the current directory (a scorer, an environment) import here as they do in Ray's workers, which
    # get the driver's current directory: the console script alone has only its own directory on sys.path.
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        status = args.func(args)  # None, or a command's own exit status (doctor: 1 when a check failed)
    except (FileNotFoundError, ValueError, UnknownSettingError) as e:
        print(f"rllib {args.command}: error: {e}", file=sys.stderr)
        return 2
    return status or 0


if __name__ == "__main__":
    sys.exit(main())
