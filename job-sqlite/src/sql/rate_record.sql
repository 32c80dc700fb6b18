-- Records ?2 starts of kind ?1 at ?3, one row each. In the claim's immediate transaction.
WITH RECURSIVE n(i) AS (
    SELECT 1 WHERE ?2 > 0
    UNION ALL
    SELECT i + 1 FROM n WHERE i < ?2
)
INSERT INTO job_rate_starts (kind, at) SELECT ?1, ?3 FROM n
