"""The MQTT broker (`gateway.broker`) and the utilities below it (`gateway.base`)."""
