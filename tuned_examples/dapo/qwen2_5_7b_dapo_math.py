"""DAPO's recipe on Qwen2.5-7B base, DAPO-Math-17K, AIME 2024 avg@32: one node of 8 GPUs.

For a GPU Ray cluster with local copies of the model and data (nothing is downloaded):

    export DAPO_MODEL_PATH=/models/Qwen2.5-7B DAPO_TRAIN_DATA=/data/dapo-math-17k.parquet
    export DAPO_EVAL_DATA=../shared/data/aime-2024.parquet
    python tuned_examples/dapo/qwen2_5_7b_dapo_math.py --checkpoint-freq 10

The config is qwen2_5_32b_dapo_math.py's (the paper's settings) with the model, the batch and
the hardware scaled to one node: 128 prompts per step instead of 512 (still 32 per optimizer
step, so 4 steps), and the learner unsharded enough to skip offload. It assumes (not run here;
this project has measured its learner only on CPU, see docs/scaling/learner.md):

- learners: 4 GPUs of 80 GB, DeepSpeed ZeRO-3 without offload (7.6B parameters x 16 bytes of
  bf16 weights and gradients and fp32 AdamW state, sharded four ways: ~30 GB per GPU), gradient
  checkpointing, micro-batches of one longest sequence (2048 + 20480 tokens); each learner
  takes 8 of the 32 groups of an optimizer step.
- env runners: the node's other 4 GPUs, one vLLM engine each holding the bf16 model (15 GB).
"""

import os
from pathlib import Path

from dapo_rllib.cli.train import load_config_file, run_example

reference, stop, _ = load_config_file(Path(__file__).with_name("qwen2_5_32b_dapo_math.py"))
config = (
    reference.copy(copy_frozen=False)
    .env_runners(num_env_runners=4, num_gpus_per_env_runner=1)
    .learners(num_learners=4, num_gpus_per_learner=1)
    .training(
        model_path=os.environ.get("DAPO_MODEL_PATH", "/models/Qwen2.5-7B"),
        train_batch_size_prompts=128,
        gen_batch_size_prompts=384,
        deepspeed_config={"zero_optimization": {"stage": 3, "overlap_comm": True}},
    )
)

if __name__ == "__main__":
    run_example(config, stop)
