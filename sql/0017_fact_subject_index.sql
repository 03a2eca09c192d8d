-- memsif_lite schema step 16 (issue 31; to become step 17 when merged after another branch's step 16):
-- the current CoreFacts of a subject, in any case. Every fact decision reads them
-- (`lower(subject) = lower(?)` and `valid_to IS NULL`: CoreFacts.current_like, current_of), which
-- the index on (subject, type) of step 3 cannot serve: each decision scanned core_facts, 1 to 3 ms
-- at a million messages. Partial: current facts only, the ones both read; rows come in id order
-- within a key, so "newest first, the first N" stops after N.
CREATE INDEX core_facts_current_subject ON core_facts(lower(subject)) WHERE valid_to IS NULL;
CREATE INDEX core_facts_current_subject_type ON core_facts(lower(subject), type) WHERE valid_to IS NULL;
