-- The database's now, in microseconds since the Unix epoch (SQLite's clock has millisecond
-- resolution). Read once per transaction and bound into its statements.
SELECT CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000
