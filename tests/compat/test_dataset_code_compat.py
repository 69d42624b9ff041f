"""A dataset with its own sample_loader/part_filter: with ``trust_dataset_code=True`` shardstore builds the
same typed samples as the real megatron-energon 7.4.1 running the same module."""

from __future__ import annotations

from pathlib import Path

import pytest
from energon_peer import missing_peer
from test_dataset_code import with_dataset_code

import shardstore

pytestmark = pytest.mark.compat

try:
    import megatron.energon  # noqa: F401
except Exception as _e:  # pragma: no cover - depends on the environment
    missing_peer(_e)

LOADER = '''
def sample_loader(raw):
    return dict(text=raw["txt"] + "|" + str(sorted(k for k in raw if not k.startswith("__"))))

def part_filter(part):
    return part in ("txt", "json")
'''


def test_same_samples_as_energon(prepared: Path) -> None:
    from megatron.energon import TextSample, WorkerConfig, get_loader, get_val_dataset

    with_dataset_code(prepared, LOADER)
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    theirs = {}
    for s in get_loader(get_val_dataset(str(prepared), split_part="train", worker_config=wc, batch_size=None)):
        assert isinstance(s, TextSample)
        theirs[s.__key__] = s.text
    ours = {s.__key__: s.text for s in shardstore.open(str(prepared), split="train", trust_dataset_code=True)}
    assert ours == theirs and len(ours) == 75
