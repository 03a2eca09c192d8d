-- memsif_lite schema step 9: the full-text index holds text composed (Unicode NFC).
-- No table changes: message_fts now indexes each message as memsif_lite.fulltext.index_text gives
-- it (composed, then schema 8's CJK rewrite), and BM25 queries are composed the same way, so a word
-- written decomposed (an accent or Hangul jamo as separate code points) matches its composed form.
-- The data step in store.py re-indexes the messages written decomposed; messages.text is unchanged.
-- Composed by Unicode 3.2's tables (memsif_lite.fulltext.compose), the same on every Python.
SELECT 1;
