-- index.sqlite as Energon 6.0 writes it (verified on megatron-energon 6.0.0).
-- Write-ahead log: the file header says WAL (bytes 18-19 = 2); no sample_parts table, so member
-- lookups walk the sample's own tar headers. Keys are not declared unique.
CREATE TABLE samples (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- row id (AUTOINCREMENT also creates sqlite_sequence)
    tar_file_id INTEGER,                   -- position of the shard in .info.yaml's shard_counts
    sample_key TEXT,                       -- member name up to the first dot of the basename, folders included
    sample_index INTEGER,                  -- position of the sample inside its shard, from 0
    byte_offset INTEGER,                   -- offset of the sample's first header (PAX/GNU extension header if any)
    byte_size INTEGER                      -- up to the next sample's first header, or the end of the last member
);
CREATE INDEX idx_samples_sample_key ON samples(sample_key);  -- lookups by key
