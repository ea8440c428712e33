-- WhatsApp templates (API.md §18; src/product/templates/, sql/016_templates.sql): the catalogue
-- of each WABA, its sync from Meta, status changes, the per-worker cache's lookup and the list
-- routes.
-- row template: item

-- name: tpl_get
-- One template of a WABA's catalogue, as the list shows it (the per-worker cache's lookup).
-- $1 waba_id
-- $2 name
-- $3 language
-- Returns one row when the catalogue has it, else none.
-- columns: template row
SELECT og_template_item(w)::text AS item
FROM wa_templates w
WHERE w.waba_id = $1 AND w.name = $2 AND w.language = $3;

-- name: tpl_replace
-- Replaces a WABA's catalogue with what a sync read from Meta: every template listed is
-- inserted or updated, every one not listed is deleted, in one statement.
-- $1 waba_id
-- $2 templates = a JSON array of {name, language, status, category, parameter_format,
--      parameters, body, buttons, meta_id} (src/product/templates/catalogue.c)
-- Returns the number of templates the catalogue now holds for the WABA.
-- columns: synced
WITH x AS (
    SELECT DISTINCT ON (name, language) *
    FROM jsonb_to_recordset($2::jsonb) AS x(name text, language text, status text, category text,
        parameter_format text, parameters text[], body text, buttons jsonb, meta_id text)
    WHERE name IS NOT NULL AND language IS NOT NULL),
del AS (
    DELETE FROM wa_templates w
    WHERE w.waba_id = $1
        AND NOT EXISTS (SELECT 1 FROM x WHERE x.name = w.name AND x.language = w.language)),
up AS (
    INSERT INTO wa_templates AS w (waba_id, name, language, status, category, parameter_format,
        parameters, body, buttons, meta_id)
    SELECT $1, x.name, x.language, x.status, x.category, x.parameter_format,
        coalesce(x.parameters, '{}'), coalesce(x.body, ''), coalesce(x.buttons, '[]'), x.meta_id
    FROM x
    ON CONFLICT (waba_id, name, language) DO UPDATE
    SET status = EXCLUDED.status, category = EXCLUDED.category,
        parameter_format = EXCLUDED.parameter_format, parameters = EXCLUDED.parameters,
        body = EXCLUDED.body, buttons = EXCLUDED.buttons, meta_id = EXCLUDED.meta_id,
        updated_at = now()
    WHERE (w.status, w.category, w.parameter_format, w.parameters, w.body, w.buttons, w.meta_id)
        IS DISTINCT FROM (EXCLUDED.status, EXCLUDED.category, EXCLUDED.parameter_format,
            EXCLUDED.parameters, EXCLUDED.body, EXCLUDED.buttons, EXCLUDED.meta_id)
    RETURNING 1)
SELECT count(*) AS synced FROM x;

-- name: tpl_set_status
-- Sets the status of templates at once: Meta's message_template_status_update webhook, or a
-- send Meta refused for its template (132001, 132015, 132016). Templates not in the catalogue
-- are left to the next sync.
-- $1 changes = a JSON array of {waba, name, language, status}, one per template
-- Returns how many templates changed.
-- columns: changed
WITH u AS (
    UPDATE wa_templates w
    SET status = x.status, updated_at = now()
    FROM jsonb_to_recordset($1::jsonb) AS x(waba text, name text, language text, status text)
    WHERE w.waba_id = x.waba AND w.name = x.name AND w.language = x.language
        AND w.status IS DISTINCT FROM x.status
    RETURNING 1)
SELECT count(*) AS changed FROM u;

-- name: tpl_list
-- One page of the templates a tenant may send: those of the WABAs of its Meta numbers, by
-- name, language and WABA (the cursor is the last row's, "name/language/wabaId").
-- $1 tenant_id
-- $2 name = exact name, or NULL
-- $3 status = exact status, or NULL
-- $4 language = exact language, or NULL
-- $5 after = the cursor: rows after this key, or NULL for the first page (checked by the
--      routes: three parts of [A-Za-z0-9_], no part can hold a '/')
-- $6 limit
-- Returns the rows of the page: its key (the next page's cursor) and its item. The key is
-- compared as the row (name, language, waba_id) the page is ordered by, not as one string:
-- under a collation other than C, '/' and '_' weigh nothing at first and "a_b/en" would not
-- sort where (a_b, en) does.
-- columns: page row
SELECT w.name || '/' || w.language || '/' || w.waba_id AS cursor, og_template_item(w)::text AS item
FROM wa_templates w
WHERE w.waba_id IN (
        SELECT n.value ->> 'wabaId'
        FROM tenants t, jsonb_each(t.settings -> 'channels' -> 'whatsapp_meta' -> 'numbers') AS n
        WHERE t.id = $1 AND n.value ? 'wabaId')
    AND ($2::text IS NULL OR w.name = $2)
    AND ($3::text IS NULL OR w.status = $3)
    AND ($4::text IS NULL OR w.language = $4)
    AND ($5::text IS NULL OR (w.name, w.language, w.waba_id) >
        (split_part($5, '/', 1), split_part($5, '/', 2), split_part($5, '/', 3)))
ORDER BY w.name, w.language, w.waba_id
LIMIT $6;

-- name: tpl_sync_schedule
-- Makes the sync of each of a tenant's WABAs due after `delay_s` seconds (0: now): on save of
-- its settings, and by each sync for its next run. A sync already due sooner stays so.
-- $1 tenant_id
-- $2 waba_ids = WABA ids, a text[]
-- $3 delay_s = seconds from now
INSERT INTO steps (kind, tenant_id, reference, due_at)
SELECT 'template_sync', $1::uuid, w, now() + $3::integer * interval '1 second'
FROM (SELECT DISTINCT w FROM unnest($2::text[]) AS w) AS u
ON CONFLICT (tenant_id, reference, kind) WHERE reference IS NOT NULL
DO UPDATE SET due_at = least(steps.due_at, EXCLUDED.due_at);
