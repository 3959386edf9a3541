"""Encodings of deployability questions for the peer tools of bench/bench_deployability.py."""
