"""`checkpoints.list_steps` beside a trainer: an empty listing of a directory that holds
step-named entries is done again before it is believed (a directory read racing a rename
and a deletion came back empty); an empty directory is believed at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from transformer_jax.workdir import checkpoints as ckpt


class _Manager:
    """The two methods `list_steps` calls, answering `listings` in turn (then the last)."""

    def __init__(self, directory: Path, listings: list[list[int]]):
        self.directory, self.listings, self.reloads, self.current = directory, listings, 0, []

    def reload(self) -> None:
        self.current = self.listings[min(self.reloads, len(self.listings) - 1)]
        self.reloads += 1

    def all_steps(self) -> list[int]:
        return self.current


@pytest.mark.parametrize("entry", ["6", "7.orbax-checkpoint-tmp-1795873909"])
def test_an_empty_listing_beside_step_entries_is_listed_again(tmp_path, entry):
    (tmp_path / entry).mkdir()
    manager = _Manager(tmp_path, [[], [], [6]])
    assert ckpt.list_steps(manager) == [6]
    assert manager.reloads == 3


def test_an_empty_directory_is_believed_at_once(tmp_path):
    (tmp_path / "notes.txt").write_text("not a step")
    manager = _Manager(tmp_path, [[], [6]])
    assert ckpt.list_steps(manager) == []
    assert manager.reloads == 1


def test_a_killed_saves_leftover_alone_gives_no_steps_after_a_few_listings(tmp_path):
    (tmp_path / "5.orbax-checkpoint-tmp-1795873909").mkdir()  # a save a kill cut short
    manager = _Manager(tmp_path, [[]])
    assert ckpt.list_steps(manager) == []
    assert manager.reloads == ckpt._LISTING_ATTEMPTS


def test_a_missing_directory_gives_no_steps(tmp_path):
    manager = _Manager(tmp_path / "checkpoints", [[]])
    assert ckpt.list_steps(manager) == []
    assert manager.reloads == 1
