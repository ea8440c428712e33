-- Cheaper sends (issue 7, measured in test/bench): completing a send updates its message row
-- (pending -> sent/failed). The partial index messages_pending made every such update a
-- non-HOT update (status is in its predicate): a new tuple plus entries in every index of
-- the table. Without it, and with room left on each page (fillfactor), the update is HOT:
-- same page, no index work. PostgreSQL CPU per fallback send went from 228 to 74 us on the
-- benchmark machine (test/bench/run.sh, same run).
--
-- Messages a crash left pending are found at start through a BRIN index on created_at
-- (tiny, nearly free to maintain on an insert-ordered table) over the last 7 days: an
-- instance that crashes is restarted at once (systemd, the container runtime), so a pending
-- message is marked unknown long before it is a week old.
ALTER TABLE messages SET (fillfactor = 70);
ALTER TABLE idempotency_keys SET (fillfactor = 70);
DROP INDEX messages_pending;
CREATE INDEX messages_created_brin ON messages USING brin (created_at);
