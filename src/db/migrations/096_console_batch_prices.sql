-- The console's sale prices of a model in batch (docs/batch.md "Batch prices"): what a batch line is
-- billed per 1M tokens of input, cached input and output; null is the online price. The cache-write
-- batch prices stay the CLI's, as the online cache-write prices are.
grant update (batch_input_price, batch_cached_input_price, batch_output_price) on models to catraca_console;
