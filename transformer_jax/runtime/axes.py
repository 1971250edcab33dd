"""The name of the device axis a batch is split along: one name for every mapped program.

The train and eval steps reduce over it (`lax.pmean`/`psum` with `axis_name=DATA_AXIS`), the
data-parallel mapping names it (pmap's `axis_name`, the shard_map mesh: training/parallel.py),
and decoding splits its batches along a mesh axis of the same name
(decoding/model_decode.py).
"""

from __future__ import annotations

DATA_AXIS = "data"
