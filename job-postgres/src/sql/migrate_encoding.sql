-- The database's encoding and name: migrate refuses SQL_ASCII, which stores text unchecked.
SELECT pg_encoding_to_char(encoding)::text, datname::text
FROM pg_catalog.pg_database
WHERE datname = current_database()
