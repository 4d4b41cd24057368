"""DAPO with a tool, over several turns: the tiny model learns to multiply by calling `python`.

The `dapo_tool_math` environment asks for products of a three-digit and a two-digit number ("What is
347 * 58?"), which the ~1M-parameter model cannot work out in its head. It may call the `python` tool
(run in the bubblewrap sandbox; its output comes back as a tool message) and then answers. The tiny
tool model (`ensure_tiny_model(task="tool_arithmetic")`, shipped with the package) is warm-started to call the
tool with the right expression, to call it with a wrong one (`+` for `*`), or to answer without it: only
the first earns the reward. Validation reports held-out accuracy and tool use (the share of episodes
that called the tool); the run ends with `validation tool_arithmetic/avg@4: <before> -> <after>` and
the same for `tool_use`.

    python tuned_examples/dapo/tiny_tool_arithmetic_dapo.py --no-tune
    rllib train file tuned_examples/dapo/tiny_tool_arithmetic_dapo.py --no-tune --stop '{"training_iteration": 5}'

The config is tiny_arithmetic_dapo.py's with the environment, its validation set and the model
switched, an episode's budget for a call, its output and the answer (max_response_length counts the
tool's tokens too), and three turns at most.
"""

from pathlib import Path

from dapo_rllib.cli.train import load_config_file, run_example
from dapo_rllib.models.tiny import ensure_tiny_model

math_config, _, _ = load_config_file(Path(__file__).with_name("tiny_arithmetic_dapo.py"))
config = (
    math_config.copy(copy_frozen=False)
    .environment("dapo_tool_math", env_config={"dataset": "tool_arithmetic", "split": "train"})
    # Validation on the 200 held-out products, 4 samples each, before training and every 10 iterations,
    # sampled as in training (top_p 1.0): at the reference's 0.7 the warm start already calls the tool on
    # every problem, and tool use would not show what RL changed.
    .evaluation(eval_dataset="tool_arithmetic", eval_max_problems=200, eval_top_p=1.0)
    .training(
        model_path=str(ensure_tiny_model(task="tool_arithmetic")),
        max_response_length=128,
        max_turns=3,
        overlong_buffer_len=16,
    )
)

stop = {"training_iteration": 30}

if __name__ == "__main__":
    run_example(config, stop)
