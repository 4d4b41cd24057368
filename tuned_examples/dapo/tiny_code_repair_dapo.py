"""DAPO over several attempts: the tiny code model sees which public tests its program failed and tries again.

The `dapo_code_repair` environment is the code environment with feedback: after an attempt that fails
one of a task's first two (public) tests it shows the failures (the call, what the program returned or
what went wrong, what was expected) and the model writes the whole program again, up to 3 attempts; the
reward is on the task's other (hidden) tests. Its tiny model (`ensure_tiny_model(task="code_repair")`,
shipped with the package) is warm-started on such episodes: right at once, a failure then the fix after the
feedback, or the same failure twice. Validation reports the pass rate of the last attempt (avg@4) and
of the first (first_answer_acc); the run ends with both, before -> after.

    python tuned_examples/dapo/tiny_code_repair_dapo.py --no-tune
    rllib train file tuned_examples/dapo/tiny_code_repair_dapo.py --no-tune --stop '{"training_iteration": 5}'

The config is tiny_code_dapo.py's with the environment and the model switched, an episode's budget for three
attempts and the feedback between them (max_response_length counts the feedback's tokens too), and
10 iterations validated on 96 held-out tasks.
"""

from pathlib import Path

from dapo_rllib.cli.train import load_config_file, run_example
from dapo_rllib.models.tiny import ensure_tiny_model

code_config, _, _ = load_config_file(Path(__file__).with_name("tiny_code_dapo.py"))
config = (
    code_config.copy(copy_frozen=False)
    .environment("dapo_code_repair", env_config={"dataset": "generated", "split": "train", "public_tests": 2})
    # Half the held-out tasks: an episode of three attempts takes three times as long to sample.
    .evaluation(eval_max_problems=96)
    .training(
        model_path=str(ensure_tiny_model(task="code_repair")),
        max_turns=3,
        max_prompt_length=128,
        max_response_length=256,
        overlong_buffer_len=32,
    )
)

# Fewer iterations than the single-step example's 40: the warm-started repair model passes nearly every
# held-out task after 10, and dynamic sampling then needs ever more rounds to find groups that are not
# all right.
stop = {"training_iteration": 10}

if __name__ == "__main__":
    run_example(config, stop)
