-- memsif_lite schema step 21 (stop 37): a fact decision looks up, among its subject's current
-- facts of one type, the one stating it again (CoreFacts.current_stated: the statement but for ASCII
-- case and closing punctuation) and the values of its slot (current_in_slot). Through the index
-- of step 17 both read every such fact (a subject holds thousands over a long life: 0.7-2.7 ms a
-- decision on a million-message file); these answer them from the index. Partial, as step 17's.
CREATE INDEX core_facts_current_stated ON core_facts(lower(subject), type, lower(rtrim(stmt, '.!? ')))
    WHERE valid_to IS NULL;
CREATE INDEX core_facts_current_slot ON core_facts(lower(subject), type, slot) WHERE valid_to IS NULL;
