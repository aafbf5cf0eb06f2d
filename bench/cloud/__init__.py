"""Cloud-side benchmarks: the TSBS-IoT-shaped bronze generator and the Spark job benchmark."""
