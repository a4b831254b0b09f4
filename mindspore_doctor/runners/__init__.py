"""Runners: each composes measure -> judge -> findings for one entry point (``lint``, ``check_data``).

They sit above the measuring layers (``static/``, ``data/``, ``probes/``) and the rules, and below the adapters
and the CLI; the training session (``training/session.py``), ``sanity`` and ``tune`` are runners of their own.
"""
