"""The uplink: selected local topics forwarded to a cloud broker through a durable outbox."""
