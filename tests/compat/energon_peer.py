"""The peer of the compatibility tests: the real megatron-energon (the ``compat`` extra).

Without it a compat test module is skipped, except in CI, where the compat tests must run and a
missing peer is an error rather than a quiet skip.
"""

from __future__ import annotations

from typing import NoReturn

import pytest
from ci import in_ci


def missing_peer(error: BaseException) -> NoReturn:
    """Call where importing megatron-energon failed: skips the module, or raises in CI."""
    why = f"megatron-energon is not importable ({error!r}); install the `compat` extra"
    if in_ci():
        raise RuntimeError(why + " (CI must run the compat tests)") from error
    pytest.skip(why, allow_module_level=True)


def energon_samples(path: object, split: str = "train", decode: bool = False) -> list[tuple[str, dict]]:
    """Every sample of ``split`` as Energon's own val loader yields it, in its order: the key and the
    raw parts (no decoding; a JSONL line comes parsed under ``json``, as Energon's JSONL factory gives it),
    or with ``decode`` the parts as Energon's default decoder gives them."""
    from megatron.energon import (
        Cooker,
        DefaultTaskEncoder,
        Sample,
        WorkerConfig,
        basic_sample_keys,
        edataclass,
        get_loader,
        get_val_dataset,
        stateless,
    )

    @edataclass
    class RawSample(Sample):
        parts: dict

    @stateless
    def cook(raw: dict) -> RawSample:
        return RawSample(**basic_sample_keys(raw), parts={k: v for k, v in raw.items() if not k.startswith("__")})

    class RawBytes(DefaultTaskEncoder):
        decoder = None
        cookers = [Cooker(cook)]

    class Decoded(DefaultTaskEncoder):  # the default decoder
        cookers = [Cooker(cook)]

    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    encoder = Decoded() if decode else RawBytes()
    ds = get_val_dataset(str(path), split_part=split, worker_config=wc, batch_size=None, task_encoder=encoder)
    return [(s.__key__, s.parts) for s in get_loader(ds)]
