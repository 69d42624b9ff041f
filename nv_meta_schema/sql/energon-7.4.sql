-- index.sqlite as Energon 7.4 writes it (verified on megatron-energon 7.4.1): its tables and indexes.
-- shardstore's IndexWriter runs this very script (nv_meta_schema.tables_sql), so what it writes
-- cannot drift from what is validated. Rollback journal, never WAL (bytes 18-19 of the file = 1;
-- Layout.journal), fully committed, so readers may open it with mode=ro&immutable=1. The UNIQUE
-- constraint on sample_key is the index for lookups by key. The tables Energon writes only for some
-- options are in energon-7.4-media.sql.
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
CREATE INDEX idx_samples_by_tar_and_idx ON samples(tar_file_id, sample_index);
CREATE INDEX idx_sample_parts_seq ON sample_parts(tar_file_id, sample_index, content_byte_offset);
CREATE INDEX idx_sample_parts_full ON sample_parts(tar_file_id, sample_index, part_name, content_byte_offset, content_byte_size);
