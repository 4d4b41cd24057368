"""DAPO with LoRA adapters on Qwen2.5-0.5B-Instruct and grade-school math: one GPU, or this CPU.

For a machine with local copies of the model and data (nothing is downloaded); the paths come from
environment variables, as in the 7B and 32B examples:

    rllib data convert /data/gsm8k/train.parquet /data/gsm8k-train.parquet   # GSM8K's rows -> DAPO's
    rllib data convert /data/gsm8k/test.parquet /data/gsm8k-test.parquet
    export DAPO_MODEL_PATH=/models/Qwen2.5-0.5B-Instruct
    export DAPO_TRAIN_DATA=/data/gsm8k-train.parquet DAPO_EVAL_DATA=/data/gsm8k-test.parquet
    python tuned_examples/dapo/qwen2_5_0_5b_instruct_lora_math.py --checkpoint-freq 10
    rllib export runs/.../checkpoint_000050 ./adapter      # a PEFT adapter directory (--merge: a model)

What differs from full fine-tuning, and why:

- Rank-32 adapters on every linear layer of the decoder (alpha 64); the base model frozen, in
  bfloat16 (1 GB), the adapters and their AdamW state in float32 (35M parameters, ~0.6 GB).
- lr 1e-5: ten times the full fine-tuning rate of the reference recipe (1e-6), the factor
  adapters need for the same progress ("LoRA Without Regret", Thinking Machines, 2025).
- After each step only the adapters (70 MB in float32) travel to the engine, which serves the base
  model with them (lora_sync="auto" picks this path on GPU engines; on CPU engines it sends the
  merged weights, faster there: docs/scaling/lora.md. It logs which).
- One GPU: the learner and the engine share it (half each, below); on a CPU machine drop the
  `num_gpus_*` settings and `vllm_engine_kwargs`, the rest holds. `bench/scale.py --workload
  qwen2.5-0.5b-shape-lora-bf16` measures this model's shape with LoRA on this project's CPU
  (docs/scaling/lora.md, "bfloat16"); this file itself has not been run here (no model, no GPU).
"""

import os

import dapo_rllib  # noqa: F401
from dapo_rllib.algorithm.dapo import DAPOConfig
from dapo_rllib.cli.train import run_example

config = (
    DAPOConfig()
    .environment("dapo_math", env_config={"dataset": os.environ.get("DAPO_TRAIN_DATA", "/data/gsm8k-train.parquet")})
    .evaluation(
        evaluation_interval=10,
        eval_dataset=os.environ.get("DAPO_EVAL_DATA", "/data/gsm8k-test.parquet"),
        eval_num_samples=4,
        eval_max_problems=500,
        eval_temperature=1.0,
        eval_top_p=0.7,
    )
    .env_runners(num_env_runners=1, num_gpus_per_env_runner=0.5)
    .learners(num_learners=1, num_gpus_per_learner=0.5)
    .training(
        model_path=os.environ.get("DAPO_MODEL_PATH", "/models/Qwen2.5-0.5B-Instruct"),
        model_dtype="bfloat16",
        vllm_engine_kwargs={"gpu_memory_utilization": 0.4},
        lora_rank=32,
        lora_alpha=64,
        lora_target_modules="all-linear",
        lr=1e-5,
        lr_warmup_steps=10,
        group_size=8,
        train_batch_size_prompts=64,
        gen_batch_size_prompts=128,
        max_num_gen_batches=10,
        minibatch_size_prompts=16,
        max_prompt_length=512,
        max_response_length=1024,
        overlong_buffer_len=256,
        max_tokens_per_micro_batch=16384,
        gradient_checkpointing=True,
    )
)

stop = {"training_iteration": 100}

if __name__ == "__main__":
    run_example(config, stop)
