"""The small default policies: Qwen2-architecture causal LMs built and warm-started locally.

Nothing is downloaded. `ensure_tiny_model(task)` returns the shipped build, or builds once into a cache
directory (`cache`):

1. a byte-level BPE tokenizer trained on the task's own text, with a Qwen-style chat template
   (`tokenizer`);
2. a ~1M-parameter `Qwen2ForCausalLM` (a standard Hugging Face architecture, so vLLM serves it);
3. a short supervised warm start on worked answers (`warm_start`), so that RL starts from a policy that
   is sometimes right.

Six tasks (`RECIPES`, in `recipes`): "arithmetic", "code", "sums", "tool_arithmetic", "code_repair" and
"take_away".
The warm start imitates several ways of answering, in fixed proportions, and only some of them earn the
reward (`answers`):

- arithmetic: "Answer: 85" is right; "Answer: 85." keeps its period and "The answer is 85." has
  no "Answer:" line, both wrong for the DAPO math scorer (see rewards/math_dapo.py);
- code: `return a + b` in the requested function is right; printing instead of returning, or
  naming the function `solution`, fails the tests;
- sums: all three styles are in the right format and differ in length (SUMS_ANSWER_STYLES):
  what the reward then selects is getting the sum right within the response limit;
- tool_arithmetic: the python tool with the right expression, then its output copied into the
  answer, is right; the tool with `+` for `*`, or an answer without the tool, is wrong;
- code_repair: right at once; a code-style failure, the feedback, then the fix; or the same
  failure twice (REPAIR_ANSWER_STYLES).

Part of what RL then learns from the verifiable reward is that format, the rest is getting the
task right: both show up in held-out accuracy. The result is a plain `save_pretrained`
directory: any other Hugging Face model directory (a local Qwen2.5 checkpoint, say) can be used
in its place.

The reference build of every recipe ships with the package (`shipped`): a fresh machine builds nothing, and
`ensure_tiny_model` returns the shipped directory. The build (`build`) runs in a child process whose kernels
and threads are pinned, with every random draw from `seed`. Next to the weights it writes `build_record.json`
(`BUILD_RECORD`, in `record`): the recipe, the seed, a fingerprint of the weights (`weights_fingerprint`), the
held-out accuracy of the built model (`held_out`) and the machine it was built on. `describe_build` compares a
build with the shipped one, which the test suite was checked with; tests/conftest.py prints that when a test
fails.

$DAPO_RLLIB_TINY_SEED (`SEED_ENV`, default 0) is the seed of the default builds: another seed
builds another model the same recipe can produce, into `<version>-seed<N>`, to check that the
test suite does not depend on the particular model built. $DAPO_RLLIB_TINY_RECIPES (`RECIPE_SET_ENV`)
picks the recipes: "full" (the default) or "test" (`TEST_RECIPES`, shorter warm starts of their own
versions, which the test suite builds).

`python -m dapo_rllib.models.tiny [TASK ...]` says where the default models of these tasks are (every task when
none is named), building those that neither ship nor are cached, a line for each; `--verify` builds them again
and compares them with the shipped builds, `--ship` replaces the shipped builds.
"""

from dapo_rllib.models.tiny.answers import (
    CODE_ANSWER_STYLES,
    SUMS_ANSWER_STYLES,
    code_answer,
    python_call,
    repair_answer,
    repair_feedback,
    sums_answer,
    tool_answer,
)
from dapo_rllib.models.tiny.build import build_environment, build_tiny_model
from dapo_rllib.models.tiny.cache import (
    SEED_ENV,
    cached_tiny_model_path,
    default_cache_dir,
    default_tiny_model_path,
    ensure_tiny_model,
)
from dapo_rllib.models.tiny.random_model import build_random_model
from dapo_rllib.models.tiny.recipes import RECIPE_SET_ENV, RECIPES, TEST_RECIPES, WarmStartRecipe, recipe_for
from dapo_rllib.models.tiny.record import BUILD_RECORD, read_build_record, weights_fingerprint
from dapo_rllib.models.tiny.shipped import (
    SHIPPED_DIR,
    describe_build,
    is_reference_build,
    reference_record,
    shipped_model_path,
    shipped_versions,
)
from dapo_rllib.models.tiny.tokenizer import CHAT_TEMPLATE, TOOL_CHAT_TEMPLATE
from dapo_rllib.models.tiny.warm_start import conversation_ids

__all__ = [
    "BUILD_RECORD",
    "CHAT_TEMPLATE",
    "CODE_ANSWER_STYLES",
    "RECIPES",
    "RECIPE_SET_ENV",
    "SHIPPED_DIR",
    "SEED_ENV",
    "SUMS_ANSWER_STYLES",
    "TEST_RECIPES",
    "TOOL_CHAT_TEMPLATE",
    "WarmStartRecipe",
    "build_environment",
    "build_random_model",
    "build_tiny_model",
    "cached_tiny_model_path",
    "code_answer",
    "conversation_ids",
    "default_cache_dir",
    "default_tiny_model_path",
    "describe_build",
    "ensure_tiny_model",
    "is_reference_build",
    "python_call",
    "read_build_record",
    "recipe_for",
    "reference_record",
    "repair_answer",
    "repair_feedback",
    "shipped_model_path",
    "shipped_versions",
    "sums_answer",
    "tool_answer",
    "weights_fingerprint",
]
