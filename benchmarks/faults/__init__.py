"""The fault benchmark: buggy and healthy MindSpore training programs with known answers.

Each module in ``programs/`` is one training script a user could have written,
with one seeded fault (or none), its expected finding codes, and a plain-MindSpore
check that the fault really has its effect. ``kit`` holds what they share,
``runner`` runs one of them with and without the Doctor, and
``scripts/bench_faults.py`` runs them all and scores the Doctor.
"""
