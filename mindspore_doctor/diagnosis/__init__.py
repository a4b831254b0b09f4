"""Diagnosis: from the findings (symptoms) of a report to ranked causes with remedies.

    diagnosis = diagnose(report, history=doctor.history)
    report.meta["diagnosis"] = diagnosis.to_dict()
    print(diagnosis.to_text())

The knowledge base (``knowledge.CAUSES``) is data; ``engine`` only evaluates it.
"""
from __future__ import annotations

from mindspore_doctor.diagnosis.engine import PREDICATES, Diagnosis, RankedCause, diagnose, weight_layers_of
from mindspore_doctor.diagnosis.knowledge import CAUSES, Cause, Symptom

__all__ = ["CAUSES", "PREDICATES", "Cause", "Diagnosis", "RankedCause", "Symptom", "diagnose", "weight_layers_of"]
