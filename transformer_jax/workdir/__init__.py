"""A run's workdir: everything a run leaves on disk, read and written in one layer.

Below training and inference (both read and write through here), above `nn` and `data`:

    checkpoints.py       the layout (config.json, tokenizer/, checkpoints/<step>/, metrics.jsonl,
                         tensorboard/), orbax save and verified restore, corrupt ones moved aside
    checkpoint_saves.py  a failed asynchronous save stops the run in one line (`SaveWatch`)
    state_checks.py      digests of every saved array, shapes, NaN/Inf, step: what a restore checks
    read_noise.py        orbax's per-array echo of a failed read, silenced
    params.py            a run's parameters alone (no optimizer), with its config and tokenizers
    averaging.py         the mean of the last N checkpoints' parameters; an averaged workdir
    history.py           metrics.jsonl after kills and resumes; a history without checkpoints
    resume.py            the resume guard: which config changes a workdir accepts
    config_renames.py    config names that changed: an old config.json still reads
    lock.py              one trainer per workdir (flock on <workdir>/.lock)
    directory.py         is a --workdir usable at all (checked before anything is built)

Nothing is imported here, so that `workdir.lock` and `workdir.directory` (checked by the
train launcher before JAX starts) stay light; import the module you need.
"""
