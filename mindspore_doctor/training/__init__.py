"""The training Doctor: ``DoctorSession`` (the loop-agnostic core, which measures and judges), ``RunOutputs`` (what a
run writes) and the adapters, ``Doctor`` (a ``Model.train`` callback whose ``watch()`` serves hand-written loops)."""
