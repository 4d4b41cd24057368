"""`rllib doctor MODEL`: the pre-flight checks of `dapo_rllib.doctor`, as a table; exit status 1 if one fails."""

from __future__ import annotations

import argparse
import dataclasses

from dapo_rllib.doctor.report import format_table, write_json
from dapo_rllib.doctor.run import DoctorSettings, run_doctor
from dapo_rllib.models.resolve import MODEL_DTYPES


def add_doctor_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = DoctorSettings()
    parser.add_argument(
        "model", help="Hugging Face model directory, GGUF file, or packaged model (smollm2-135m-instruct)"
    )
    parser.add_argument("--dtype", default=defaults.model_dtype, choices=MODEL_DTYPES, help="model_dtype of the run")
    parser.add_argument("--max-prompt-length", type=int, default=defaults.max_prompt_length, help="the run's")
    parser.add_argument("--max-response-length", type=int, default=defaults.max_response_length, help="the run's")
    parser.add_argument(
        "--samples", type=int, default=defaults.samples, help="completions of each probe prompt for the parity checks"
    )
    parser.add_argument("--max-tokens", type=int, default=defaults.max_tokens, help="tokens of each completion")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--out", default=None, help="also write the checks' values as JSON here")


def run_doctor_command(args: argparse.Namespace) -> int:
    same_names = ("max_prompt_length", "max_response_length", "samples", "max_tokens", "seed")
    settings = DoctorSettings(model_dtype=args.dtype, **{name: getattr(args, name) for name in same_names})
    print(f"rllib doctor: loading {args.model} in a learner and in vLLM ({settings.model_dtype}) ...", flush=True)
    checks = run_doctor(args.model, settings)
    print(format_table(args.model, checks))
    if args.out:
        print(f"checks written to {write_json(args.out, args.model, dataclasses.asdict(settings), checks)}")
    return 1 if any(check.failed for check in checks) else 0
