"""A catalogue dataset (any TFDS dataset but fra_eng): its resources read (etils' epath needs
importlib_resources, which tensorflow-datasets does not install), and a source that cannot
be reached is one `DownloadError` naming the dataset and what to do, not a traceback."""

from __future__ import annotations

import socket

import pytest
import requests

from transformer_jax.data import datasets, download
from transformer_jax.data.config import data_config


def test_epath_reads_a_packages_resources():
    # What `tfds.builder("ted_hrlr_translate/pt_to_en")`'s preparation called, and failed on
    # with "No module named 'importlib_resources'".
    from etils import epath

    assert epath.resource_path("tensorflow_datasets").joinpath("__init__.py").exists()


class _Offline:
    """A builder whose source does not resolve, as `requests` reports it."""

    def __init__(self, cfg):
        self.data_path = f"{cfg.data_dir}/{cfg.name}/1.0.0"

    def is_prepared(self):
        return False

    def download_and_prepare(self, **kwargs):
        try:
            raise socket.gaierror(-2, "Name or service not known")
        except socket.gaierror as error:
            raise requests.exceptions.ConnectionError("Max retries exceeded") from error


class _Broken(_Offline):
    def download_and_prepare(self, **kwargs):
        raise RuntimeError("something else went wrong")


def catalogue(tmp_path, monkeypatch, builder):
    cfg = data_config()
    cfg.name, cfg.data_dir = "ted_hrlr_translate/pt_to_en", str(tmp_path)
    monkeypatch.setattr(datasets, "catalogue_builder", builder)
    return cfg


def test_an_unreachable_source_is_one_download_error(tmp_path, monkeypatch):
    cfg = catalogue(tmp_path, monkeypatch, _Offline)
    with pytest.raises(download.DownloadError) as caught:
        datasets.prepared_builder(cfg)
    said = str(caught.value)
    assert "'ted_hrlr_translate/pt_to_en'" in said and "Max retries exceeded" in said
    assert "tfds build ted_hrlr_translate/pt_to_en" in said and "--config.data.data_dir" in said
    assert "\n" not in said


def test_other_failures_are_not_called_a_download_error(tmp_path, monkeypatch):
    cfg = catalogue(tmp_path, monkeypatch, _Broken)
    with pytest.raises(RuntimeError, match="something else went wrong"):
        datasets.prepared_builder(cfg)
    # fra_eng's own download has its own messages: a connection error there is not renamed.
    fra = data_config()
    assert datasets._unreachable(requests.exceptions.ConnectionError("x"), fra) is None
