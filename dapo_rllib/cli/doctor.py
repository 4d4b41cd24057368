"""`rllib doctor MODEL`: the pre-flight checks of `dapo_rllib.doctor`, as a table; exit status 1 if one fails."""

from __future__ import annotations

import argparse
import dataclasses

from dapo_rllib.algorithm.dapo import DAPOConfig
from dapo_rllib.doctor.data_checks import DataProbe
from dapo_rllib.doctor.report import format_table, write_json
from dapo_rllib.doctor.run import DoctorSettings, run_doctor
from dapo_rllib.models.resolve import MODEL_DTYPES
from dapo_rllib.paths import input_path, output_path

#: The sequence lengths the context check assumes unless given: a small run's. DAPOConfig's own defaults (the
#: paper's 2,048 + 20,480) exceed the context of most models one checks before a first run.
CHECKED_LENGTH = 1024


def add_doctor_arguments(parser: argparse.ArgumentParser) -> None:
    defaults, run = DoctorSettings(), DAPOConfig()
    parser.add_argument(
        "model",
        type=input_path,
        help="Hugging Face model directory, GGUF file, or packaged model (smollm2-135m-instruct)",
    )
    parser.add_argument("--dtype", default=run.model_dtype, choices=MODEL_DTYPES, help="model_dtype of the run")
    parser.add_argument(
        "--max-prompt-length",
        type=int,
        default=CHECKED_LENGTH,
        help="the run's (for the context check, and the samples of --data)",
    )
    parser.add_argument(
        "--max-response-length",
        type=int,
        default=CHECKED_LENGTH,
        help="the run's (for the context check, and the samples of --data)",
    )
    parser.add_argument(
        "--samples", type=int, default=defaults.samples, help="completions of each probe prompt for the parity checks"
    )
    parser.add_argument("--max-tokens", type=int, default=defaults.max_tokens, help="tokens of each completion")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--out", type=output_path, default=None, help="also write the checks' values as JSON here")
    data = parser.add_argument_group("the run's data (--data): answers parsed, reward mean, groups with variation")
    data.add_argument(
        "--data", type=input_path, default=None, help="DAPO-format .parquet/.jsonl file: sample its first problems"
    )
    data.add_argument("--problems", type=int, default=DataProbe.problems, help="problems of --data to sample")
    data.add_argument(
        "--group-size", type=int, default=run.group_size, help="the run's group_size: samples per problem"
    )
    data.add_argument("--temperature", type=float, default=run.temperature, help="the run's sampling temperature")
    data.add_argument(
        "--scorer",
        default=None,
        help="the run's scorer: math_dapo, math_verify or module:function (default: by data source)",
    )


def run_doctor_command(args: argparse.Namespace) -> int:
    config = DAPOConfig().training(
        model_path=args.model,
        model_dtype=args.dtype,
        max_prompt_length=args.max_prompt_length,
        max_response_length=args.max_response_length,
        group_size=args.group_size,
        temperature=args.temperature,
    )
    if args.scorer is not None:
        config.environment(env_config={"scorer": args.scorer})
    settings = DoctorSettings(samples=args.samples, max_tokens=args.max_tokens, seed=args.seed)
    data = None if args.data is None else DataProbe(args.data, problems=args.problems, seed=args.seed)
    print(f"rllib doctor: loading {args.model} in a learner and in vLLM ({args.dtype}) ...", flush=True)
    checks = run_doctor(config, settings, data)
    print(format_table(args.model, checks))
    if args.out:
        report_settings = {
            "model_dtype": args.dtype,
            "max_prompt_length": args.max_prompt_length,
            "max_response_length": args.max_response_length,
            **dataclasses.asdict(settings),
            **({} if data is None else {"data": dataclasses.asdict(data), "group_size": args.group_size}),
        }
        print(f"checks written to {write_json(args.out, args.model, report_settings, checks)}")
    return 1 if any(check.failed for check in checks) else 0
