-- Rate cards (API.md §22; src/product/costs/, docs/costs.md): the global card, one row, as PUT
-- /admin/rates stored it (checked by the gateway: og_rate_card_parse). A tenant's card is its
-- settings' `rates`.
CREATE TABLE rate_card (
    one        boolean     PRIMARY KEY DEFAULT true CHECK (one),
    card       jsonb       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- One currency: a tenant's card (settings.rates) in the global card's currency, checked where
-- either is written. The SQLSTATEs are answered by the gateway (og_answer_db_failure,
-- src/product/app/answer.c): OGC01 a tenant's card in another currency (422 on
-- settings.rates.currency), OGC02 a global card whose currency differs from tenants' cards
-- (409 conflict).
CREATE FUNCTION og_rates_tenant_currency() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    cur text;
BEGIN
    IF NEW.settings ? 'rates' THEN
        SELECT card ->> 'currency' INTO cur FROM rate_card;
        IF cur IS NOT NULL AND cur IS DISTINCT FROM NEW.settings -> 'rates' ->> 'currency' THEN
            RAISE EXCEPTION USING ERRCODE = 'OGC01', MESSAGE = 'the tenant''s rate card is not in ' || cur;
        END IF;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER tenants_rates_currency BEFORE INSERT OR UPDATE OF settings ON tenants
FOR EACH ROW WHEN (NEW.settings ? 'rates')
EXECUTE FUNCTION og_rates_tenant_currency();

CREATE FUNCTION og_rates_global_currency() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM tenants t
    WHERE t.settings ? 'rates' AND t.settings -> 'rates' ->> 'currency' IS DISTINCT FROM NEW.card ->> 'currency';
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'OGC02', MESSAGE = 'tenants have rate cards in another currency';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER rate_card_currency BEFORE INSERT OR UPDATE ON rate_card
FOR EACH ROW EXECUTE FUNCTION og_rates_global_currency();
