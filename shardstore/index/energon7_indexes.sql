-- Energon 7 creates these after its bulk load; shardstore creates them before, as its rows arrive in index order (see IndexWriter).
CREATE INDEX idx_samples_by_tar_and_idx ON samples(tar_file_id, sample_index);
CREATE INDEX idx_sample_parts_seq ON sample_parts(tar_file_id, sample_index, content_byte_offset);
CREATE INDEX idx_sample_parts_full ON sample_parts(tar_file_id, sample_index, part_name, content_byte_offset, content_byte_size);
