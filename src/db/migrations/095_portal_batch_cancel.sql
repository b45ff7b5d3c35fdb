-- The portal's "Cancelar" on the "Lotes" page (docs/batch.md "In the portal"): the API's cancel, the
-- same statement (src/batch/batches.ts cancelBatch), moves a batch still running to `cancelling`;
-- the front doors' runners and vendor loop end it. The portal changes nothing else of a batch.
grant update (status, cancelling_at) on batches to catraca_portal;
