-- index.sqlite as Energon 7.0 writes it (verified on megatron-energon 7.0.0).
-- Write-ahead log (bytes 18-19 of the file = 2); sample_parts holds every member's data range.
-- No NOT NULL or UNIQUE constraints yet; a plain index serves lookups by key.
CREATE TABLE samples (
    tar_file_id INTEGER,      -- position of the shard in .info.json's shard_counts
    sample_key TEXT,          -- member name up to the first dot of the basename, folders included
    sample_index INTEGER,     -- position of the sample inside its shard, from 0
    byte_offset INTEGER,      -- offset of the sample's first header (PAX/GNU extension header if any)
    byte_size INTEGER         -- up to the next sample's first header, or the end of the last member
);
CREATE TABLE sample_parts (
    tar_file_id INTEGER,          -- as in samples
    sample_index INTEGER,         -- as in samples
    part_name TEXT,               -- member name after the key's dot: "jpg", "seg.png", ...
    content_byte_offset INTEGER,  -- offset of the member's data (after its header)
    content_byte_size INTEGER     -- size of the member's data
);
CREATE INDEX idx_samples_sample_key ON samples(sample_key);
CREATE INDEX idx_samples_by_tar_and_idx ON samples(tar_file_id, sample_index);
CREATE INDEX idx_sample_parts_seq ON sample_parts(tar_file_id, sample_index, content_byte_offset);
CREATE INDEX idx_sample_parts_full ON sample_parts(tar_file_id, sample_index, part_name, content_byte_offset, content_byte_size);
