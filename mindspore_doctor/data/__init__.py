"""Data measurement: samples a bounded part of the training (and eval) dataset, column roles and statistics
(``data/signals.py``); the MSD301-MSD313 rules judge them, ``mindspore_doctor.check_data`` runs both
(``runners/check_data.py``).

MindSpore is imported only when a dataset is sampled.
"""
