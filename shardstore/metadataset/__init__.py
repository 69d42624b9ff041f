"""Energon metadatasets (``MetadatasetV2`` YAML, and the legacy ``Metadataset``): blends of datasets,
subsets, subflavors, aux file stores and joins, read without Energon and without running any code.

A metadataset YAML names, per split, one dataset, a ``blend`` (weights), a ``blend_epochized``
(repetitions) or a ``join``; entries may point at further metadataset YAMLs. ``open_metadataset``
flattens the chosen split into *sources* (one prepared dataset each, with its subset range, weight or
repetitions, subflavors and aux stores) the way Energon's ``get_datasets`` does, then iterates them:
a blend draws sources by weight, a blend_epochized gives each source exactly its repetitions per epoch
(``blend`` says how), and the draws are seeded per (seed, rank, worker), so a run is reproducible and
readers differ.

Every sample is a ``MetaSample``: the dataset's sample plus ``__source__`` (the source's name) and
``__subflavors__``, and ``sample.aux``: the source's file stores (``sample.aux["images"][name]``).
The YAML is parsed with ``yaml.safe_load`` and validated strictly: an unknown key or a wrong type is a
``ConfigError`` naming the YAML file and the key. ``__module__``/``__class__`` entries are checked
against Energon's names and never imported (a ``joiner`` is recorded, not called: use ``cook=``).

One module per step, each importing only the ones before it: ``config`` (YAML -> validated tree),
``resolve`` (tree -> one ``SourceSpec`` per leaf of a split), ``sources`` (specs opened: datasets,
joins, aux stores, ``MetaSample``), ``blend`` (the seeded draws, ``Metadataset``, ``interleave``) and
``report`` (``metadataset_info``, ``metadataset_check``).
"""

from __future__ import annotations

from .blend import Interleaved, Metadataset, interleave, open_metadataset
from .config import BLEND, BLEND_EPOCHIZED, SINGLE, Subset
from .report import MetaCheckReport, metadataset_check, metadataset_info
from .resolve import SourceSpec, dataset_paths
from .sources import AuxStores, MetaSample, Source

__all__ = [
    "Metadataset",
    "MetaSample",
    "AuxStores",
    "Source",
    "SourceSpec",
    "Subset",
    "open_metadataset",
    "interleave",
    "Interleaved",
    "metadataset_info",
    "metadataset_check",
    "MetaCheckReport",
    "dataset_paths",
    "BLEND",
    "BLEND_EPOCHIZED",
    "SINGLE",
]
