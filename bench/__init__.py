"""Side-by-side benchmarks of sagegate against the 2018 reference; run ``python -m bench``.

See ``bench/README.md`` for what is measured and how to read the ratios.
"""
