"""The reference DAPO run (docs/design/algorithm.md §5): Qwen2.5-32B base on DAPO-Math-17K, AIME 2024 avg@32.

For a GPU Ray cluster with local copies of the model and data (nothing is downloaded); the
paths come from environment variables so that the file runs unchanged both ways:

    export DAPO_MODEL_PATH=/models/Qwen2.5-32B DAPO_TRAIN_DATA=/data/dapo-math-17k.parquet
    export DAPO_EVAL_DATA=../shared/data/aime-2024.parquet
    python tuned_examples/dapo/qwen2_5_32b_dapo_math.py --checkpoint-freq 10
    rllib train file tuned_examples/dapo/qwen2_5_32b_dapo_math.py --checkpoint-freq 10

Every DAPO setting below is the paper's. The scale settings assume (not run here; this
project has measured its learner only on CPU, see docs/scaling/learner.md):

- learners: 16 GPUs of 80 GB (two 8-GPU nodes), DeepSpeed ZeRO-3 with the AdamW state offloaded
  to host memory (32B x 12 bytes of fp32 master weights and moments = 384 GB, 24 GB per learner
  process), gradient checkpointing, micro-batches of one longest sequence (2048 + 20480 tokens);
  each learner takes 2 of the 32 groups of an optimizer step.
- env runners: 8 GPUs, one vLLM engine each holding the bf16 model (64 GB).
"""

import os

import dapo_rllib  # noqa: F401
from dapo_rllib.algorithm.dapo import DAPOConfig
from dapo_rllib.cli.train import run_example

config = (
    DAPOConfig()
    .environment("dapo_math", env_config={"dataset": os.environ.get("DAPO_TRAIN_DATA", "/data/dapo-math-17k.parquet")})
    # Validation as the paper reports it: AIME 2024 avg@32 at temperature 1.0, top_p 0.7.
    .evaluation(
        evaluation_interval=5,
        eval_dataset=os.environ.get("DAPO_EVAL_DATA", "../shared/data/aime-2024.parquet"),
        eval_num_samples=32,
        eval_temperature=1.0,
        eval_top_p=0.7,
    )
    .env_runners(num_env_runners=8, num_gpus_per_env_runner=1)
    .learners(num_learners=16, num_gpus_per_learner=1)
    .training(
        model_path=os.environ.get("DAPO_MODEL_PATH", "/models/Qwen2.5-32B"),
        model_dtype="bfloat16",
        vllm_engine_kwargs={"gpu_memory_utilization": 0.85},
        group_size=16,
        train_batch_size_prompts=512,
        gen_batch_size_prompts=1536,
        max_num_gen_batches=10,
        dynamic_sampling=True,
        filter_metric="acc",
        minibatch_size_prompts=32,
        max_tokens_per_micro_batch=2048 + 20480,
        gradient_checkpointing=True,
        deepspeed_config={
            "zero_optimization": {
                "stage": 3,
                "offload_optimizer": {"device": "cpu", "pin_memory": True},
                "overlap_comm": True,
            }
        },
        max_prompt_length=2048,
        max_response_length=20480,
        overlong_buffer_len=4096,
        overlong_penalty_factor=1.0,
        clip_eps_low=0.2,
        clip_eps_high=0.28,
        clip_ratio_c=10.0,
        loss_agg_mode="token-mean",
        kl_coef=0.0,
        lr=1e-6,
        lr_warmup_steps=10,
        weight_decay=0.1,
        grad_clip=1.0,
        temperature=1.0,
        top_p=1.0,
    )
)

stop = {"training_iteration": 300}

if __name__ == "__main__":
    run_example(config, stop)
