-- 0015 step bounds: what job-postgres refuses of a recorded step (migration 0018 there: an
-- output of at most 2 MiB; `jsonb` and `text` refuse NUL), refused here for every writer of
-- the file as well. Before, `job_steps` checked only that the output was JSON and the name's
-- length: a raw write or a direct `Store::save_step` stored an output of any size (8 MiB was
-- seen), an output holding `\u0000` and a name holding a NUL byte, which a worker then loaded
-- into every attempt of the job. Each refusal names its column. The NUL test of the output is
-- the payload's (migration 0007): it copies the output only when it holds the text `\u0000`.
-- Append-only: change the schema in a new numbered file.

CREATE TRIGGER job_steps_bounds_insert
BEFORE INSERT ON job_steps
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'step refused: `name` must not contain a NUL character')
    WHERE instr(CAST(NEW.name AS BLOB), x'00') > 0;
    SELECT RAISE(ABORT, 'step refused: `output` must be at most 2 MiB of JSON text')
    WHERE length(CAST(NEW.output AS BLOB)) > 2097152;
    SELECT RAISE(ABORT, 'step refused: `output` must not contain a NUL character (\u0000)')
    WHERE instr(CAST(NEW.output AS BLOB), x'00') > 0
         OR (instr(NEW.output, '\u0000') > 0 AND instr(replace(NEW.output, '\\', ''), '\u0000') > 0);
END;

CREATE TRIGGER job_steps_bounds_update
BEFORE UPDATE OF name, output ON job_steps
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'step refused: `name` must not contain a NUL character')
    WHERE instr(CAST(NEW.name AS BLOB), x'00') > 0;
    SELECT RAISE(ABORT, 'step refused: `output` must be at most 2 MiB of JSON text')
    WHERE length(CAST(NEW.output AS BLOB)) > 2097152;
    SELECT RAISE(ABORT, 'step refused: `output` must not contain a NUL character (\u0000)')
    WHERE instr(CAST(NEW.output AS BLOB), x'00') > 0
         OR (instr(NEW.output, '\u0000') > 0 AND instr(replace(NEW.output, '\\', ''), '\u0000') > 0);
END;
