"""launch_renamed_flags.rename_deprecated_flags: a renamed flag's old name still works, with
a note."""

from __future__ import annotations

from absl import flags

from transformer_jax import launch, launch_decoding_flags, launch_renamed_flags


def _decoding_flags() -> flags.FlagValues:
    flag_values = flags.FlagValues()
    launch_decoding_flags.define_decoding_flags(flag_values)
    return flag_values


def test_split_len_is_read_as_segment_len_with_one_note_each(capsys):
    argv = ["prog", "--split_len=3", "-split_len", "4", "--beam_size=2", "--", "--split_len=5"]
    renamed = launch_renamed_flags.rename_deprecated_flags(argv, _decoding_flags())
    assert renamed == ["prog", "--segment_len=3", "-segment_len", "4", "--beam_size=2", "--",
                       "--split_len=5"]  # fmt: skip
    notes = capsys.readouterr().err.splitlines()
    assert notes == ["note: --split_len is deprecated; use --segment_len (the same setting)."] * 2


def test_a_launcher_without_the_new_flag_keeps_the_old_name(capsys):
    other = flags.FlagValues()
    flags.DEFINE_integer("split_len", None, "a flag of someone else's", flag_values=other)
    assert launch_renamed_flags.rename_deprecated_flags(["prog", "--split_len=2"], other) == [
        "prog",
        "--split_len=2",
    ]
    assert capsys.readouterr().err == ""


def test_the_parser_takes_old_and_new_names_alike(capsys):
    for flag in ("--split_len=0", "--segment_len=0"):
        flag_values = _decoding_flags()
        launch.flags_parser(flag_values=flag_values, module=__name__)(["prog", flag])
        assert launch_decoding_flags.decoding_flag_values(flag_values)["segment_len"] == 0
        note = capsys.readouterr().err
        assert ("deprecated" in note) == flag.startswith("--split_len"), note
    assert (
        launch_decoding_flags.decoding_flag_values(_decoding_flags())["segment_len"] is None
    )  # the run's
