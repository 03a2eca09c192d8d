-- memsif_lite schema step 4: reserved for the work-queue migration (issue 11), which is being
-- written on another branch. This placeholder does nothing and is replaced by that migration at
-- merge; it exists only so that step 5 can be numbered as agreed.
SELECT 1;
