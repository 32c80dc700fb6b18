-- Run once on each new connection of a pool from pool_options(): the server checks every
-- second, while a statement runs, that the client is still there, and ends the session when
-- it is not (PostgreSQL 14's client_connection_check_interval). A caller that gives up on a
-- statement (the worker bounds its calls) has its connection closed; without this the
-- statement ran on to its end, holding its locks and a server connection, while the pool
-- opened another in its place. A server that cannot check (not on Linux) refuses the
-- setting: it keeps its default, and the connection is used all the same.
DO $$
BEGIN
  PERFORM set_config('client_connection_check_interval', '1s', false);
EXCEPTION WHEN OTHERS THEN
  NULL;
END
$$
