-- The set forms' plans (sql/013), made once (issue 20). A statement whose parameters are
-- arrays is planned for the arrays it is given (a custom plan) until a plan made for any
-- arrays (the generic one) looks no dearer; the generic plan assumes ten elements, so for the
-- batches of one to nine sends that moderate traffic makes, every call was planned again:
-- measured with pgbench, a one-send completion through og_msg_complete_many cost the backend
-- 541 us against 191 us with the generic plan (the benchmark's batches of 20 never showed it).
-- Planning brings nothing here: the settings of sql/013 leave each statement one plan, by the
-- primary keys, at any size. So these functions use the generic plan from the first call.
ALTER FUNCTION og_msg_complete_many(uuid[], text[], text[], text[], json[], boolean[])
    SET plan_cache_mode = force_generic_plan;

-- The pending inserts of a batch's sends, each unless its number is remembered as having no
-- WhatsApp (API.md §13): one row per send, its ordinal (from 1), its reference when it was
-- inserted (else NULL), and how many milliseconds the number stays remembered (NULL when it
-- is not): msg_insert_unless_nowa_many (sql/queries/messages.sql). The single forms keep
-- their own statements: through these functions a send alone cost the backend 20-50% more
-- (pgbench, ten sends a transaction, each alone), for the function call and its settings.
CREATE FUNCTION og_msg_insert_unless_nowa_many(p_tenant uuid[], p_reference text[], p_to text[],
    p_body text[], p_mode text[], p_channels text[], p_skipped jsonb[], p_fallback_on text[],
    p_after integer[], p_from text[], p_sender text[])
RETURNS TABLE (ord bigint, reference text, left_ms bigint)
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH x AS (
        SELECT x.*, (SELECT ceil(extract(epoch FROM w.until - now()) * 1000)::bigint
                     FROM not_on_whatsapp w WHERE w.number = x.n AND w.until > now()) AS left_ms
        FROM unnest(p_tenant, p_reference, p_to, p_body, p_mode, p_channels, p_skipped,
            p_fallback_on, p_after, p_from, p_sender)
            WITH ORDINALITY AS x(t, r, n, b, d, c, s, o, a, w, e, ord)),
    ins AS (
        INSERT INTO messages (tenant_id, reference, to_number, body, delivery_mode, channels,
            skipped, fallback_on, fallback_after_s, whatsapp_from, sms_sender)
        SELECT x.t, x.r, x.n, x.b, x.d, x.c::text[], x.s, x.o, x.a, x.w, x.e
        FROM x WHERE x.left_ms IS NULL)
    SELECT x.ord, CASE WHEN x.left_ms IS NULL THEN x.r END, x.left_ms FROM x;
END
$$;
