"""(being written)"""
from __future__ import annotations

CHECKS: list = []
SOURCE_CHECKS: list = []
