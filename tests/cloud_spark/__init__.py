"""Tests of the cloud side: lander, bronze, Spark jobs, benchmark generator."""
