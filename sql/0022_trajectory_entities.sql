-- memsif_lite schema step 22 (issue 31): an Event Trajectory's entity counts, one row an entity.
-- They were one JSON object in `trajectories.entities`, read whole to score a trajectory as a
-- candidate (φ's entity Jaccard) and written whole at every segment linked to it. A trajectory
-- running for years keeps meeting new names, numbers and nouns: at 20,000 entities a link cost
-- 15 ms and wrote a 400 KB row (benchmarks/trajectory_entities.py). Here φ asks only whether the
-- segment's ~20 entities are among the trajectory's (its primary key) and how many it holds (kept
-- in trajectory_entity_totals: a count(*) of the rows grew with them), and a link adds the segment's
-- counts row by row. The counts are exact: its members' placements'
-- (`message_units.entities`), as a forget recounts them and a `known_at` rewind derives them;
-- `memsif check` recounts them (memsif_lite/db/structure.py: trajectory_count_problems); an import
-- counts them again (COUNT_TRAJECTORY_ENTITIES, the same SQL).
-- `trajectories.entities` keeps '' from now on (NO_COUNTS); an export still writes the counts there.
CREATE TABLE trajectory_entities(
    trajectory_id INTEGER NOT NULL REFERENCES trajectories(id),
    entity        TEXT NOT NULL,
    n             INTEGER NOT NULL,
    PRIMARY KEY(trajectory_id, entity)
) STRICT, WITHOUT ROWID;
-- counted from the members (what the stored objects held: the same, on every file measured)
INSERT INTO trajectory_entities(trajectory_id, entity, n)
    SELECT s.trajectory_id, j.value, count(*) FROM segments s
    JOIN message_units u ON u.segment_id = s.id,
    json_each(CASE WHEN json_valid(u.entities) AND json_type(u.entities) = 'array' THEN u.entities ELSE '[]' END) j
    WHERE s.trajectory_id IS NOT NULL AND j.type = 'text' GROUP BY 1, 2;
CREATE TABLE trajectory_entity_totals(
    trajectory_id INTEGER PRIMARY KEY REFERENCES trajectories(id),
    n             INTEGER NOT NULL                -- its distinct entities: rows in trajectory_entities
) STRICT;
INSERT INTO trajectory_entity_totals(trajectory_id, n)
    SELECT trajectory_id, count(*) FROM trajectory_entities GROUP BY trajectory_id;
UPDATE trajectories SET entities = '' WHERE entities != '';
