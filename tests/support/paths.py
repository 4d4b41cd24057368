"""Where the tests find the repository's files and the data beside it, from whichever folder a test runs."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The config files that `rllib train file` reads in the tests.
CONFIGS = Path(__file__).resolve().parent / "configs"
# The real AIME 2024 file (960 rows: 30 problems, 32 copies each), in the shared data beside the checkout.
AIME_2024 = ROOT.parent / "shared" / "data" / "aime-2024.parquet"
