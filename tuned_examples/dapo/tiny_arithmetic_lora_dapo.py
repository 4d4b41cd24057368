"""The main job (tiny_arithmetic_dapo.py) training LoRA adapters instead of every weight.

Rank-8 adapters on every linear layer of the tiny model's decoder (PEFT), the base frozen; after
each step the weights with the adapters merged in travel to the vLLM engine (`lora_sync="auto"`
for a model this small on CPU engines, where vLLM's LoRA kernels cost more than sending it;
`lora_sync="adapter"` sends only the adapters: dapo_rllib/models/lora.py). Adapters need a larger learning rate than full fine-tuning: 1e-3 here, ten
times the main job's. Ends like the main job, with `validation arithmetic/avg@4: <before> -> <after>`.

    python tuned_examples/dapo/tiny_arithmetic_lora_dapo.py --no-tune
"""

from pathlib import Path

from dapo_rllib.cli.train import load_config_file, run_example

base = load_config_file(Path(__file__).with_name("tiny_arithmetic_dapo.py"))
config = base.config.copy(copy_frozen=False).training(lora_rank=8, lr=1e-3)
stop = base.stop

if __name__ == "__main__":
    run_example(config, stop)
