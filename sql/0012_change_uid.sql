-- memsif_lite schema step 12: every change names itself (docs/history.md, "Merges").
-- `uid` (a random 64-bit integer) travels with a change when a merge copies it into another file, so
-- merging the same file twice (or a file back into the copy it came from) copies nothing twice. A new
-- change gets random(); the rows a schema 11 file already holds get a hash of their content (data
-- step: store.change_uid), the same in every copy of that file. No index: a merge reads them all.
ALTER TABLE change_log ADD COLUMN uid INTEGER;
