"""`python -m dapo_rllib.models SOURCE ...`: make the Hugging Face directories of these model sources ready, a line
each: a GGUF file or a packaged model (e.g. smollm2-135m-instruct) is converted into the cache unless it is there."""

from __future__ import annotations

import argparse
import time

from dapo_rllib.models.resolve import ensure_model_directory, is_model_file_source, model_directory


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dapo_rllib.models", description=__doc__)
    parser.add_argument("sources", nargs="+", metavar="SOURCE", help="a GGUF file or a packaged model's name")
    sources = parser.parse_args(argv).sources
    for source in sources:
        if not is_model_file_source(source):
            parser.error(f"{source!r} is neither a GGUF file (*.gguf) nor a packaged model")
    for number, source in enumerate(sources, 1):
        if (model_directory(source) / "config.json").exists():
            print(f"[model] {number}/{len(sources)} {source}: {model_directory(source)} (cached)", flush=True)
            continue
        start = time.time()
        path = ensure_model_directory(source)
        print(f"[model] {number}/{len(sources)} {source}: {path} in {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
