# %% [markdown]
# # transformer_jax on a Colab TPU (or GPU, or CPU)
#
# English→French with the Transformer of Vaswani et al. (2017), trained data-parallel over
# every core of the runtime (`jax.pmap`; 8 cores on a TPU v2-8/v3-8), then translating a
# few sentences and drawing the attention heatmaps.
#
# *Runtime → Change runtime type → TPU*, then *Run all*. This notebook is generated from
# `experiments/colab_tpu.py` (percent format) by `python -m experiments.build_notebook`;
# edit the `.py` and regenerate. A test runs it top to bottom on CPU with a tiny config.

# %%
# Parameters. On Colab the defaults train the README's model; the test sets TJ_* variables.
import os

REPO_URL = os.environ.get("TJ_REPO_URL", "")  # your clone URL of transformer_jax (git)
CONFIG_ARG = os.environ.get("TJ_CONFIG_ARG", "")  # e.g. "d2l", "variant=small"
NUM_TRAIN_STEPS = int(os.environ.get("TJ_NUM_TRAIN_STEPS", "0"))  # 0 = the config's value
WORKDIR = os.environ.get("TJ_WORKDIR", "/content/runs/fra_eng")

# %% [markdown]
# ## Install
# If `transformer_jax` is not importable yet, clone the repository and install it with its
# pinned requirements (Colab's preinstalled JAX keeps its TPU support).

# %%
import importlib.util
import subprocess
import sys

if importlib.util.find_spec("transformer_jax") is None:
    if not REPO_URL:
        raise SystemExit("Set REPO_URL (or TJ_REPO_URL) to the git URL of transformer_jax.")
    subprocess.run(["git", "clone", "--depth=1", REPO_URL, "/content/transformer_jax"], check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "-e", "/content/transformer_jax"], check=True
    )
    sys.path.insert(0, "/content/transformer_jax")
    os.chdir("/content/transformer_jax")

# %% [markdown]
# ## The run config, and the process settings it makes
# `runtime.configure_process` applies the config's XLA flags, host allocator and Threefry
# lowering; XLA flags and the allocator only take effect before JAX starts its backend,
# so this cell comes before anything touches a device.

# %%
from configs import fra_eng
from transformer_jax import runtime

config = fra_eng.get_config(CONFIG_ARG or None)
if NUM_TRAIN_STEPS:
    config.num_train_steps, config.num_epochs = NUM_TRAIN_STEPS, 0
runtime.configure_process(config)

# %% [markdown]
# ## Which accelerator?

# %%
import jax

platform = jax.devices()[0].platform
print(f"platform: {platform.upper()}, {jax.device_count()} devices: {jax.devices()}")
if platform == "cpu":
    print("No TPU/GPU found: training runs on the CPU (fine for the tiny test config).")

# %% [markdown]
# ## Train, data-parallel over all cores
# `train_and_evaluate` pmaps one train step over `jax.local_devices()`; the global batch is
# split across them, and each evaluation also scores BLEU on validation pairs (the
# `ValidationBleu` evaluator). Re-running this cell resumes from the last checkpoint in
# `WORKDIR`.

# %%
from transformer_jax.evaluation.evaluators import ValidationBleu
from transformer_jax.training import train_and_evaluate

final = train_and_evaluate(config, WORKDIR, evaluators=[ValidationBleu])
print({k: round(v, 3) for k, v in final.items() if isinstance(v, float)})

# %% [markdown]
# ## Translate
# `Translator.from_workdir` restores the parameters of the newest checkpoint (not the
# optimizer state) with the run's tokenizers and decoding settings; `prepare` lowercases and
# spaces punctuation as the training data was, and `natural` turns a translation back into
# text to read (capitals and French punctuation, as `experiments.translate` prints it).

# %%
from transformer_jax.inference import Translator

translator = Translator.from_workdir(WORKDIR)
texts = ["Go.", "I lost.", "He's calm.", "I'm home."]
sentences = [translator.prepare(s) for s in texts]
translations = translator.translate(sentences)
for en, fr in zip(texts, translations, strict=True):
    print(f"{en!r:>14} => {translator.natural(fr, en)!r}")

# %% [markdown]
# ## Attention heatmaps
# Encoder self-attention, decoder self-attention and encoder–decoder attention (layers ×
# heads) for the first sentence and its translation, as in d2l §11.7.6.

# %%
from IPython.display import Image, display

from transformer_jax.evaluation import plot_attention

maps = translator.attention_maps(sentences[0])
png = plot_attention(maps, os.path.join(WORKDIR, "attention.png"))
display(Image(filename=str(png)))
