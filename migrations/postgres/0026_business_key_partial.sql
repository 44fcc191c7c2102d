-- A business key is unique in its namespace. Most runs have none, and they
-- no longer stand in the index: a claim writes one B-tree fewer, and a
-- lookup by run key cannot walk it. On PostgreSQL it did: the generic plan
-- of the batched claim, made while `runs` held a few hundred rows and no
-- statistics, read a duplicate's run by scanning this index for its
-- namespace (every run, since NULL keys were indexed), and kept that plan.
-- Uniqueness is unchanged: NULL business keys never conflicted.
DROP INDEX runs_business_key;
CREATE UNIQUE INDEX runs_business_key ON runs (business_key, namespace)
    WHERE business_key IS NOT NULL;
