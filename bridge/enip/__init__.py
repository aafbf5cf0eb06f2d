"""EtherNet/IP (CIP) to Rockwell / Allen-Bradley Logix controllers: tags by name."""
