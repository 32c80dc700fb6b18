-- 0049 step_output_bytes: a step's size is stored with it, so a page that shows a job's steps
-- reads no output it does not show. Append-only: change the schema in a new numbered file.
--
-- The dashboard's job page shows each step's size, and its output only when that is at most
-- 64 KiB. It computed the size as octet_length(output::text) for every step of the job before
-- its LIMIT: each output decompressed and printed as text, up to 2 MiB each and any number of
-- steps. A review measured 400 steps of 1.9 MB: 8.5 s a view, over the page's statement
-- budget, so the page always failed, and each view held one of the dashboard's connections
-- for seconds.
--
-- Now step_save.sql stores the byte length of the JSON text the worker wrote (output_bytes),
-- and inspect_steps_shown.sql takes its first steps before reading any size, and reads the
-- stored size. Rows written before this migration, or by a writer that does not set it, have
-- none: their size is computed as before, for the steps shown only.
--
-- ADD COLUMN without a default does not rewrite the table.

ALTER TABLE job.steps
    ADD COLUMN output_bytes integer
        CONSTRAINT steps_output_bytes_check CHECK (output_bytes >= 0);
