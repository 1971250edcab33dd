"""TFDS builder `fra_eng`: the d2l English-French corpus as an array_record dataset.

Splits:
  train / validation / test: by a hash of the preprocessed English sentence (see splitting.py),
    so alternative translations of one sentence never straddle splits.
  full: every well-formed pair in file order, for the book's `load_data_nmt(num_examples=600)`
    parity mode (`train_split="full[:601]"`: it keeps lines 0..600). Order is preserved by
    `disable_shuffling`.

Features: `en`, `fr`, preprocessed as in the book. (Example keys are line numbers in fra.txt.)
Build stats (malformed-line counts by reason, split sizes, the zip's sha256) are logged and kept
in the dataset info metadata (`metadata.json` next to `dataset_info.json`).

Built and read without TensorFlow: `download_and_prepare(file_format="array_record")` writes with
the array_record writer, and `as_data_source` reads with array_record's random-access reader.
"""

from __future__ import annotations

import dataclasses

import tensorflow_datasets as tfds
from absl import logging
from etils import epath

from transformer_jax.data import corpus, download, preprocessing, splitting

_DESCRIPTION = """English-French sentence pairs from Tatoeba (manythings.org/anki export,
2019-04-07), as used by Dive into Deep Learning, "Machine Translation and the Dataset".
Preprocessed as in the book: no-break spaces to spaces, lowercase, space before , . ! ?"""

_CITATION = """Zhang, Lipton, Li, Smola. Dive into Deep Learning. https://d2l.ai
Data: www.manythings.org/anki and tatoeba.org (CC-BY 2.0)."""

_MANUAL_INSTRUCTIONS = f"""Offline use: put `{download.ZIP_NAME}` (from {download.DEFAULT_URL})
in the manual dir (`<data_dir>/downloads/manual/` by default), or set the data config's
`zip_path`."""


class CorpusTooSmallError(corpus.CorruptArchiveError):
    """The zip's fra.txt holds too few valid pairs to fill every split; a corpus that cannot
    be used, as a damaged archive cannot (launchers print it as one FATAL line)."""


@dataclasses.dataclass
class FraEngConfig(tfds.core.BuilderConfig):
    """Split parameters. They change the data, so they are part of the config (and its dir)."""

    validation_fraction: float = 0.05
    test_fraction: float = 0.05
    split_seed: int = 0


def config_name(validation_fraction: float, test_fraction: float, split_seed: int) -> str:
    """Directory-safe config name, e.g. `val500_test500_seed0` (fractions in 1/10000)."""
    return (
        f"val{round(validation_fraction * 1e4)}_test{round(test_fraction * 1e4)}_seed{split_seed}"
    )


def make_config(validation_fraction: float, test_fraction: float, split_seed: int) -> FraEngConfig:
    splitting.check_fractions(validation_fraction, test_fraction)
    return FraEngConfig(
        name=config_name(validation_fraction, test_fraction, split_seed),
        description=f"validation {validation_fraction:g} test {test_fraction:g} seed {split_seed}",
        validation_fraction=validation_fraction,
        test_fraction=test_fraction,
        split_seed=split_seed,
    )


def select_config(
    validation_fraction: float, test_fraction: float, split_seed: int
) -> str | FraEngConfig:
    """What to pass as `FraEng(config=...)`: the registered config's name when the parameters
    match it (TFDS refuses a new config object under a registered name), else a custom config.
    """
    config = make_config(validation_fraction, test_fraction, split_seed)
    registered = {c.name for c in FraEng.BUILDER_CONFIGS}
    return config.name if config.name in registered else config


class FraEng(tfds.core.GeneratorBasedBuilder):
    """The fra-eng corpus; see the module docstring."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Initial release."}
    MANUAL_DOWNLOAD_INSTRUCTIONS = _MANUAL_INSTRUCTIONS
    BUILDER_CONFIGS = [make_config(0.05, 0.05, 0)]

    @tfds.core.utils.classproperty
    @classmethod
    def code_path(cls) -> epath.Path:
        # TFDS 4.9.10 resolves this via `importlib_resources` (an optional etils[epath] extra,
        # not installed here) for any builder inside a package. This file is the answer anyway.
        return epath.Path(__file__)

    def __init__(
        self,
        *,
        zip_path: str | None = None,
        url: str | None = download.DEFAULT_URL,
        known_digests: dict[str, frozenset[str]] | None = None,
        **kwargs,
    ):
        """Args beyond TFDS's: where to take the zip (see `download.locate_zip`).

        `known_digests=None` verifies downloads against `download.KNOWN_DIGESTS` and accepts
        local files as they are; a dict is enforced for local files too.
        """
        self._zip_path = zip_path
        self._url = url
        self._known_digests = known_digests
        super().__init__(**kwargs)

    def _info(self) -> tfds.core.DatasetInfo:
        # DatasetInfo directly, not dataset_info_from_configs, which expects README/CITATIONS
        # files in a TFDS-style package directory.
        return tfds.core.DatasetInfo(
            builder=self,
            description=_DESCRIPTION,
            features=tfds.features.FeaturesDict(
                {"en": tfds.features.Text(), "fr": tfds.features.Text()}
            ),
            supervised_keys=("en", "fr"),
            homepage="https://d2l.ai/chapter_recurrent-modern/machine-translation-and-dataset.html",
            citation=_CITATION,
            metadata=tfds.core.MetadataDict(),
            # Keeps `full` in file order (the book's first-600-lines mode needs it).
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        zip_path = download.locate_zip(
            zip_path=self._zip_path,
            # The private attribute: the public `manual_dir` property raises when it is empty.
            manual_dir=dl_manager._manual_dir,
            download_dir=dl_manager.download_dir,
            url=self._url,
            known_digests=self._known_digests,
        )
        sha256 = download.file_digests(zip_path)["sha256"]
        logging.info("fra_eng: reading %s (sha256 %s)", zip_path, sha256)
        report = corpus.ReadReport()
        full, by_split = [], {name: [] for name in splitting.SPLIT_NAMES}
        config = self.builder_config
        for item in corpus.read_pairs(zip_path, report):
            en, fr = preprocessing.preprocess_pair(item.english, item.french)
            example = (item.line_number, {"en": en, "fr": fr})
            full.append(example)
            split = splitting.split_of(
                en,
                validation_fraction=config.validation_fraction,
                test_fraction=config.test_fraction,
                seed=config.split_seed,
            )
            by_split[split].append(example)
        sizes = {name: len(examples) for name, examples in by_split.items()} | {"full": len(full)}
        stats = report.as_dict()
        logging.info(
            "fra_eng build: kept %d pairs, skipped malformed lines %s (%d blank); split sizes %s",
            report.kept,
            stats["malformed"],
            report.blank,
            sizes,
        )
        for name, size in sizes.items():
            if size == 0:
                # TFDS cannot write an empty split; say why instead of its AssertionError.
                raise CorpusTooSmallError(
                    f"fra_eng: split {name!r} would be empty ({report.kept} pairs read from "
                    f"{zip_path}, fractions validation={config.validation_fraction} "
                    f"test={config.test_fraction}); supply the full corpus "
                    f"(--config.data.zip_path=/path/to/{download.ZIP_NAME}) or larger fractions "
                    "(data.validation_fraction, data.test_fraction)."
                )
        for example in report.examples:
            logging.warning("fra_eng: skipped %s", example)
        self.info.metadata.update(
            {"read_report": stats, "split_sizes": sizes, "zip_sha256": sha256}
        )
        splits = {name: self._generate_examples(examples) for name, examples in by_split.items()}
        splits["full"] = self._generate_examples(full)
        return splits

    def _generate_examples(self, examples: list[tuple[int, dict]]):
        # Keys are the line numbers (unique); with disable_shuffling the records are stored in
        # this order, which is file order.
        yield from examples
