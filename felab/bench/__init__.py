"""`make bench`: the benchmark phases, each runnable alone (`python -m felab.bench.NAME`)."""
