"""Benchmarks, run as modules: ``python -m benchmarks.codec_bench``."""
