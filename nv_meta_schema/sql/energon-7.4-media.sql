-- index.sqlite of Energon 7.4: the tables it may lack, written by `energon prepare
-- --media-metadata-by-...` only (AUTOINCREMENT also creates sqlite_sequence).
CREATE TABLE media_metadata (
    entry_key TEXT PRIMARY KEY,        -- member name, key.part
    metadata_type TEXT NOT NULL,       -- kind of media metadata (image, video, audio, ...)
    metadata_json TEXT NOT NULL        -- the metadata as JSON
);
CREATE TABLE media_filters (
    filter_id INTEGER PRIMARY KEY AUTOINCREMENT,   -- row id
    strategy TEXT NOT NULL,                        -- how media were detected (glob, header, extension)
    patterns TEXT,                                 -- comma-separated patterns of the glob strategy
    created_at_utc TEXT DEFAULT CURRENT_TIMESTAMP, -- when the filter was recorded
    UNIQUE(strategy, patterns)
);
