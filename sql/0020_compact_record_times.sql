-- memsif_lite schema step 20: a smaller file, continued (issue 31: one million messages).
-- * `messages_known_at` indexes the second of a message's record time (`unixepoch(known_at)`: an
--   integer of a few bytes instead of 26 bytes of text, 40 → 13–15 bytes a message), as
--   `change_log_at` does a change's since schema 19. The reads by record time (a `known_at` filter,
--   the messages learnt after a rewind's time) decide a row of another second from the index alone
--   and read only the rows of the bound's own second (memsif_lite/db/messages.py: learnt); `memsif
--   check` names a message whose record time is not a time (the index holds none for it).
DROP INDEX messages_known_at;
CREATE INDEX messages_known_at ON messages(unixepoch(known_at));
