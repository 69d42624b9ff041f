"""Outside formats, one package each, all through the episode model (``shardstore.episodes.model``).

A format package ``convert/<format>/`` holds everything about that format (reader, writer, check,
the conventions it maps) and imports no other format's package; what several formats share lives
in the hub, ``shardstore.episodes``. Its two central public functions:

- ``read_<format>(src, ...) -> EpisodeStream``: the source's schema, its episodes (lazily) and its
  own metadata files (kept byte for byte under ``.nv-meta/source/`` by the import);
- ``write_<format>(stream: EpisodeStream, out, ...)``: the format written from episodes, staged
  and moved into place so that an interrupted export leaves nothing half-written.

The shard store is one more reader and writer: ``EpisodeWriter`` writes a stream into shards and
prepares them; ``shardstore.episodes(ds).stream()`` reads a prepared dataset back as a stream.
So ``import X`` is ``EpisodeWriter(out).write_stream(read_X(src))`` and ``export X`` is
``write_X(episodes(ds).stream(), out)``; any format converts to any other through the hub.
"""
