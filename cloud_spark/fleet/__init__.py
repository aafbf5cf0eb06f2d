"""The fleet's cloud side: signed configurations sent to gateways, enrollment of new gateways
(their certificates), and the commands behind them (`python -m cloud_spark.fleet`, docs in
docs/operations.md). Imports nothing of the gateway's packages: the document format is
written down here again, and a test proves the gateway accepts what this signs."""
