"""core_algos is a public API for users who want the math alone: it must import without Ray or vLLM."""

import subprocess
import sys

BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('ray', 'vllm'):
            raise ModuleNotFoundError('blocked for this test: ' + name)
sys.meta_path.insert(0, Block())
import dapo_rllib.algorithm.core_algos as ca
import torch
loss, _ = ca.compute_policy_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2))
print(float(loss))
"""


def test_core_algos_imports_and_runs_without_ray_or_vllm():
    out = subprocess.run([sys.executable, "-c", BLOCK], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # ratio 1, advantage 1: loss = -1 on every token
    assert float(out.stdout.strip()) == -1.0
