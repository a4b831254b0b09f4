"""Pure numeric analyses over numbers the measuring layers collected: per-sample probabilities, labels, errors.

No MindSpore here: numpy (and cleanlab for confident learning) in, plain dataclasses out. This package sits in the
layer of the rules (``tests/test_layers.py``): it may import the signals, ``findings``, ``rule``, ``config`` (for
typing), numpy and cleanlab, never the measuring layers (probes, static, data), the runners, the adapters or the
exporters. The rules judge what it returns; the training adapters feed it; the exporters format it.
"""
