-- Placeholder on the h-whout branch only: migration 009 belongs to issue 16 (log indexes),
-- developed in parallel. Migrations must be numbered without gaps (sql/embed.py), so this
-- branch carries an empty 009 to build its 010; when the branches merge, issue 16's file
-- replaces this one.
SELECT 1;
