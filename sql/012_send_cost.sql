-- What a send costs PostgreSQL (issue 20, measured with `perf record` on the backends during
-- the benchmark's fallback_first scenario, test/bench): two things on the messages and attempts
-- tables cost more than they give, since only this gateway writes those rows, through the
-- statements of sql/queries/ (the same reasoning as the attempts' columns of sql/005):
--
-- - The CHECKs on messages.delivery_mode and messages.status: PostgreSQL 15 parses each CHECK's
--   stored expression and compiles it again on every statement that writes the table (the
--   pending insert and the completion update of every send): 9% of the backends' CPU.
-- - The foreign key from attempts to messages: every attempt's insert ran an SPI query that
--   locks its message row FOR KEY SHARE (a WAL record of its own), just before the same
--   statement updates that row: 6% of the backends' CPU. An attempt is only ever inserted by
--   msg_complete, which updates its message in the same statement, and by fallback_begin, for
--   the message its step has just read (sql/queries/); prune deletes a message's attempts
--   with it (omnigate_prune_batch).
ALTER TABLE messages DROP CONSTRAINT messages_delivery_mode_check;
ALTER TABLE messages DROP CONSTRAINT messages_status_check;
ALTER TABLE attempts DROP CONSTRAINT attempts_tenant_id_reference_fkey;
