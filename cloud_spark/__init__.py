"""outpost cloud side: the lander (MQTT → bronze files) and the PySpark batch jobs.

Entry point: ``python -m cloud_spark land ...`` and ``python -m cloud_spark <job> ...`` (also
``spark-submit cloud_spark/__main__.py <job> ...``). Imports nothing from gateway, bridge or
storage; the message format shared with the gateway lives in :mod:`cloud_spark.contract`.
"""
