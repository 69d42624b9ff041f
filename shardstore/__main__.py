"""``python -m shardstore``: the ``shardstore`` command."""

from .cli import run

run(prog_name="shardstore")
