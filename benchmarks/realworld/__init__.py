"""The real-code corpus: healthy models from maintained MindSpore model libraries and MindSpore's own ``nn``
building blocks, trained with their libraries' recipes on synthetic and small real data.

Each module in ``programs/`` is one architecture; ``corpus`` holds what they share beyond
``benchmarks.faults.kit``, ``runner`` lints, trains and times one of them with and without the
Doctor, and ``scripts/bench_realworld.py`` runs them all. The bar is zero warning/error findings.
"""
