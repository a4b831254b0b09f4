"""The training Doctor: ``DoctorSession`` (the loop-agnostic core) and its adapters, ``Doctor`` (a
``Model.train`` callback whose ``watch()`` serves hand-written loops)."""
