"""DAPO on generated code tasks with a tiny Qwen2 model: the main example with the code env swapped in.

The policy writes a Python function per prompt ("Write a Python function `add(a, b)` that
returns the sum of its two arguments."); the `dapo_code` environment runs it against the task's
tests in the sandbox (dapo_rllib/tasks/sandbox.py) and rewards +1 when all pass, -1 otherwise. The
tiny code model is warm-started to answer in three ways, of which only `return` in the requested
function passes (see dapo_rllib/models/tiny/answers.py), so the held-out pass rate has room to rise.

The config is tiny_arithmetic_dapo.py's with the environment, its validation set, the model
path and the response length changed: nothing else. Ends with
`eval pass rate: <before> -> <after>`.

    python tuned_examples/dapo/tiny_code_dapo.py --no-tune
    rllib train file tuned_examples/dapo/tiny_code_dapo.py --no-tune --stop '{"training_iteration": 5}'
"""

from pathlib import Path

from dapo_rllib.cli.train import load_config_file, run_example
from dapo_rllib.models.tiny import ensure_tiny_model

math_config, stop, _ = load_config_file(Path(__file__).with_name("tiny_arithmetic_dapo.py"))
config = (
    math_config.copy(copy_frozen=False)
    .environment("dapo_code", env_config={"dataset": "generated", "split": "train"})
    .evaluation(eval_dataset="generated")  # the held-out generated tasks
    # A function in a fenced block is longer than an arithmetic answer. The code model is built
    # on first use (a few minutes), then cached.
    .training(model_path=str(ensure_tiny_model(task="code")), max_response_length=64)
)

if __name__ == "__main__":
    (outcome,) = run_example(config, stop)
    for name, before in outcome.eval_before.items():
        if name in outcome.eval_after:
            print(f"eval pass rate: {before:.3f} -> {outcome.eval_after[name]:.3f}")
