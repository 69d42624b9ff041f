-- index.sqlite as Energon 7 writes it (rollback journal, never WAL). shardstore writes exactly this.
CREATE TABLE samples (
    tar_file_id INTEGER NOT NULL,      -- position of the shard in .info.json's shard_counts
    sample_key TEXT NOT NULL UNIQUE,   -- member name up to the first dot of the basename, folders included
    sample_index INTEGER NOT NULL,     -- position of the sample inside its shard, from 0
    byte_offset INTEGER,               -- offset of the sample's first header (PAX/GNU extension header if any)
    byte_size INTEGER                  -- up to the next sample's first header, or the end of the last member
);
CREATE TABLE sample_parts (
    tar_file_id INTEGER,               -- as in samples
    sample_index INTEGER,              -- as in samples
    part_name TEXT,                    -- member name after the key's dot: "jpg", "seg.png", ...
    content_byte_offset INTEGER,       -- offset of the member's data (after its header)
    content_byte_size INTEGER          -- size of the member's data
);
