"""OPC UA servers as bridge devices (asyncua): subscriptions, security, reconnect."""
