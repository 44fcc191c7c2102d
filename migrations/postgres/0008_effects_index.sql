-- The unique (namespace, run_key, effect_type, target) index already serves
-- every look-up of a run's effects; a second index on (namespace, run_key,
-- state) only cost each effect's two state changes another index entry.
DROP INDEX IF EXISTS effects_run;
