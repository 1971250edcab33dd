r"""Paragraphs: BLEU of a run on inputs of several test sentences, whole vs cut at sentence ends.

    python -m benchmarks.paragraphs --workdir=runs/fra_eng
    python -m benchmarks.paragraphs --workdir=runs/fra_eng --segment_lens=0,1,32 --sentences=2

Users paste paragraphs; the test split holds single pairs. This joins `--sentences` test
pairs (drawn with a fixed seed from the whole split) into one source line and one reference
line, `--num` times, and translates the lines with the run's `Translator` at each
`--segment_lens` value (0 = every line whole, 1 = sentence by sentence, the default; N = parts
of whole sentences of up to N tokens),
then prints sacreBLEU / chrF on detokenised text, the source lengths, and the mean ratio of
output to reference words (a model that stops early shows it here first).
"""

from __future__ import annotations

import time

import numpy as np
from absl import app, flags

from transformer_jax import launch

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", None, "Training workdir (config, tokenizers, checkpoints).")
flags.DEFINE_list("segment_lens", ["0", "1", "16", "32"], "segment_len values (0 = whole).")
flags.DEFINE_integer("sentences", 6, "Test pairs joined into one paragraph.")
flags.DEFINE_integer("num", 200, "Paragraphs.")
flags.DEFINE_integer("beam_size", None, "Default: the run's eval.beam_size.")
flags.DEFINE_integer("seed", 0, "Draws the pairs of each paragraph.")


def paragraphs(
    pairs: list[tuple[str, str]], sentences: int, num: int, seed: int
) -> list[tuple[str, str]]:
    """`num` (source, reference) lines, each `sentences` distinct random pairs joined by spaces."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(num):
        rows = rng.choice(len(pairs), size=sentences, replace=False)
        out.append((" ".join(pairs[i][0] for i in rows), " ".join(pairs[i][1] for i in rows)))
    return out


def main(argv: list[str]) -> None:
    launch.quiet_library_logs()
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    from transformer_jax.data import load_split_pairs
    from transformer_jax.evaluation.bleu import corpus_scores
    from transformer_jax.inference import Translator
    from transformer_jax.runtime import configure_process
    from transformer_jax.workdir.checkpoints import load_config

    try:  # a directory that holds no run: one FATAL line naming it
        config = load_config(FLAGS.workdir)
        configure_process(config)
        translator = Translator.from_workdir(FLAGS.workdir)
    except OSError as error:
        launch.fatal(str(error))
    lines = paragraphs(
        load_split_pairs(config.data, config.data.test_split),
        FLAGS.sentences,
        FLAGS.num,
        FLAGS.seed,
    )
    sources, references = [s for s, _ in lines], [r for _, r in lines]
    lengths = [len(translator.src_tokenizer.encode(s)) + 1 for s in sources]
    print(
        f"{FLAGS.workdir} step {translator.step}: {len(lines)} paragraphs of {FLAGS.sentences} "
        f"test pairs, source tokens with <eos> p10 {np.percentile(lengths, 10):.0f}, "
        f"p50 {np.median(lengths):.0f}, p90 {np.percentile(lengths, 90):.0f} "
        f"(trained on at most {translator.settings['trained_len']})"
    )
    refs = [translator.detokenize(r) for r in references]
    print("| segment_len | BLEU | chrF | output / reference words | seconds |")
    print("|---|---|---|---|---|")
    for segment_len in map(int, FLAGS.segment_lens):
        start = time.perf_counter()
        texts = translator.translate(
            sources, segment_len=segment_len, beam_size=FLAGS.beam_size, warn=False
        )
        seconds = time.perf_counter() - start
        hyps = [translator.detokenize(t) for t in texts]
        scores = corpus_scores(hyps, refs)
        ratio = np.mean([len(h.split()) / len(r.split()) for h, r in zip(hyps, refs, strict=True)])
        name = f"{segment_len} (whole)" if segment_len == 0 else str(segment_len)
        bleu, chrf = scores["bleu"], scores["chrf"]
        print(f"| {name} | {bleu:.2f} | {chrf:.2f} | {ratio:.2f} | {seconds:.0f} |")


if __name__ == "__main__":
    app.run(main, flags_parser=launch.flags_parser(required=("workdir",)))
