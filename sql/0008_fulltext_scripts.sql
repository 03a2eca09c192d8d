-- memsif_lite schema step 8: BM25 for scripts written without spaces (Chinese, Japanese, Korean).
-- No table changes: message_fts now indexes each message as memsif_lite.fulltext.cjk_grams rewrites
-- it (a run of CJK characters as its characters and overlapping pairs; other text unchanged; since
-- schema 9, composed first: memsif_lite.fulltext.index_text). The
-- data step in store.py re-indexes the messages that have CJK text.
SELECT 1;
