-- A vendor-mode batch line's hold (docs/batch.md "vendor mode"): kind 'batch'. It reserves money
-- as any hold (tenants.held_micros and api_keys.held_micros count it: the balance and the key's
-- limit available to other requests are less by it), settles and expires as a request's, but it is
-- not a request in flight at catraca (the vendor runs the line, for up to 24 h): the key's
-- max_concurrent counts holds of kind 'request' only (catraca_admit_limited), so a vendor batch
-- does not block the key's online traffic. Taken by catraca_admit_vendor_line.
alter table holds drop constraint holds_kind_check;
alter table holds add constraint holds_kind_check check (kind in ('request', 'lease', 'batch'));
