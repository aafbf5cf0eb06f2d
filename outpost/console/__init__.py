"""The appliance's web console: set the gateway up and look after it from a browser.

Served by outpost/console/server.py on the `[status]` listener when `[console] enabled`;
docs/console.md describes it for users.
"""
