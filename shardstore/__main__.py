"""``python -m shardstore``: the ``shardstore`` command."""

from .cli import main

main(prog_name="shardstore")
