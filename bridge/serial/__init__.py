"""Serial line devices: framing and parsing (pure) and the port reader."""
