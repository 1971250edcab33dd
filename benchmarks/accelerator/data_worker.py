r"""Builds a run config's data (the TFDS dataset, its tokenizers), so a run after it starts
with its data built, as the README run's target assumes ("data already built").

    python -m benchmarks.accelerator.data_worker --config=configs/fra_eng.py \
        --data_dir=/tmp/tfds --zip_path=.device_data/fra-eng.zip

`data.create_input_pipeline` builds what is missing (dataset, SentencePiece model,
truecaser; each cached under --data_dir) and reads what is there; nothing is trained.
"""

from __future__ import annotations

import argparse
import time

from transformer_jax import launch
from transformer_jax.data import create_input_pipeline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="A run config, e.g. configs/fra_eng.py")
    parser.add_argument("--data_dir", default="", help="Default: the config's data.data_dir.")
    parser.add_argument("--zip_path", default="")
    args = parser.parse_args()
    config = launch.load_config_file(args.config)
    if args.data_dir:
        config.data.data_dir = args.data_dir
    if args.zip_path:
        config.data.zip_path = args.zip_path
    start = time.perf_counter()
    create_input_pipeline(config.data)
    print(f"data_worker: {config.data.data_dir} ready in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
