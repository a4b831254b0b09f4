"""``RankMonitor``: the Doctor's cross-rank checks under msrun (MSD501-503) and the merged report.

The Doctor calls, on every rank and in this order: ``on_train_begin`` (MSD501),
``on_step_end`` on every step (MSD503 once after ``rank_batch_steps`` steps,
MSD502 every ``rank_check_every`` steps), ``on_train_end`` (a last MSD502
check) and ``merge_reports``. Each call that exchanges data does so on every
rank at the same point, whatever happened locally: the methods never raise
(their own failures become MSD001 findings and an empty payload). In a single
process every method is a no-op returning nothing.
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from mindspore_doctor.catalog import make_finding
from mindspore_doctor.checks import attempt, internal_error
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.distributed.channel import RankChannel, RankInfo, rank_info
from mindspore_doctor.findings import Finding, Report
from mindspore_doctor.rules import distributed as rules

_CODES = ("MSD501", "MSD502", "MSD503")
_STILL_IN_COLLECTIVES = "; this rank still takes part in the collectives with an empty payload."
_SHARDED_MODES = ("semi_auto_parallel", "auto_parallel", "hybrid_parallel")


class RankMonitor:
    def __init__(self, config: DoctorConfig, info: RankInfo | None = None) -> None:
        self.config = config
        self.info = info or rank_info()
        self.channel = RankChannel(self.info, config.collective_timeout_s)
        self._fingerprint: Any = None
        self._names: list[str] = []
        self._differing: set[str] = set()
        self._digests: list[str] = []
        self._steps_seen = 0
        self._last_check = 0
        self._step = 0
        self._broken_reported = False
        self._check_seconds: list[float] = []
        self.replicated = True
        """False under semi-auto/auto/hybrid parallel: every rank holds a slice, MSD501-503 do not apply."""
        self.meta: dict[str, Any] = {"rank": self.info.rank, "world_size": self.info.world_size,
                                     "backend": self.info.backend}

    @property
    def active(self) -> bool:
        return self.info.distributed

    def rank_dir(self, summary_dir: str | None) -> str | None:
        """Where this rank writes its own files: ``summary_dir/rank_{id}`` under msrun."""
        if summary_dir is None or not self.active:
            return summary_dir
        return str(Path(summary_dir) / f"rank_{self.info.rank}")

    # --- the Doctor's hooks -----------------------------------------------------------------

    def on_train_begin(self, cb_params: Any) -> list[Finding]:
        if not self.active:
            return []
        findings: list[Finding] = []
        self.meta["parallel_mode"] = str(getattr(cb_params, "parallel_mode", None))
        self.meta["device_number"] = getattr(cb_params, "device_number", None)
        if self.meta["parallel_mode"].lower() in _SHARDED_MODES:  # the same on every rank: all skip together
            self.replicated = False
            return [make_finding(
                "MSD002", f"{', '.join(_CODES)} skipped: parallel_mode={self.meta['parallel_mode']} slices "
                "parameters and data across ranks, so ranks are not expected to hold equal weights or read "
                "different samples.", location={"check": "rank-fingerprint"}, evidence={"codes": list(_CODES)})]
        payload = self._measure(findings, "rank-fingerprint", lambda: self._begin_payload(cb_params))
        gathered = self._exchange(payload, findings)
        if gathered is not None:
            names = self._names or next((p["names"] for p in gathered.values() if p and "names" in p), [])
            self._names = self._names or names
            prints = {r: _array(p) for r, p in gathered.items()}
            self._differing = set(rules.differing_parameters(names, prints, self.config))
            findings += self._judge("MSD501", lambda: rules.rank_init_mismatch(names, prints, self.config))
            findings += self._not_measured(gathered, "MSD501")
        return findings

    def on_step_end(self, cb_params: Any) -> list[Finding]:
        if not (self.active and self.replicated):
            return []
        findings: list[Finding] = []
        self._steps_seen += 1
        self._step = int(getattr(cb_params, "cur_step_num", self._steps_seen) or self._steps_seen)
        if self._steps_seen <= self.config.rank_batch_steps:
            self._measure(findings, "rank-batches", lambda: self._digests.extend(
                _batch_digests(getattr(cb_params, "train_dataset_element", None))))
            if self._steps_seen == self.config.rank_batch_steps:
                findings += self._compare_batches()
        if self._steps_seen - self._last_check >= self.config.rank_check_every:
            findings += self._compare_weights()
        return findings

    def on_train_end(self, cb_params: Any) -> list[Finding]:
        """A last MSD502 check, unless the last step was just checked."""
        if not (self.active and self.replicated) or self._steps_seen == self._last_check:
            return []
        return self._compare_weights()

    def merge_reports(self, report: Report) -> Report | None:
        """Rank 0: every rank's findings in one report (``location["ranks"]``); other ranks: None.

        A single process gets its own report back.
        """
        if not self.active:
            return report
        findings: list[Finding] = []
        gathered = self._exchange({"findings": [f.to_dict() for f in report.findings]}, findings)
        if self.info.rank != 0:
            return None
        per_rank = {r: [Finding.from_dict(d) for d in p["findings"]] for r, p in (gathered or {}).items() if p}
        per_rank.setdefault(0, list(report.findings))
        per_rank[0] = per_rank[0] + findings
        meta = dict(report.meta)
        meta["distributed"] = {**self.meta, "ranks_merged": sorted(per_rank), **self.cost()}
        return Report(findings=rules.merge_rank_findings(per_rank), meta=meta)

    def cost(self) -> dict[str, Any]:
        """Wall time of the Doctor's collectives on this rank (what the checks cost)."""
        seconds, checks = self.channel.seconds, self._check_seconds
        return {"collectives": len(seconds),
                "collective_median_s": statistics.median(seconds) if seconds else None,
                "collective_max_s": max(seconds) if seconds else None,
                "weight_checks": len(checks),
                "weight_check_median_s": statistics.median(checks) if checks else None}

    # --- checks -----------------------------------------------------------------------------

    def _begin_payload(self, cb_params: Any) -> dict[str, Any]:
        from mindspore_doctor.distributed.fingerprint import ParameterFingerprint

        parameters = [p for p in _trained_parameters(cb_params) if int(np.prod(p.shape)) > 0]
        self._fingerprint = ParameterFingerprint(parameters)
        self._names = list(self._fingerprint.names)
        return {"names": self._names, "fp": self._fingerprint.measure().tolist()}

    def _compare_weights(self) -> list[Finding]:
        started = time.perf_counter()
        try:
            return self._compare_weights_now()
        finally:
            self._check_seconds.append(time.perf_counter() - started)

    def _compare_weights_now(self) -> list[Finding]:
        findings: list[Finding] = []
        self._last_check = self._steps_seen
        payload = self._measure(findings, "rank-fingerprint", lambda: {"fp": self._fingerprint.measure().tolist()})
        gathered = self._exchange(payload, findings)
        if gathered is not None:
            prints = {r: _array(p) for r, p in gathered.items()}
            findings += self._judge("MSD502", lambda: rules.rank_divergence(
                self._names, prints, self._differing, self._step, self.config))
            self._differing |= set(rules.differing_parameters(self._names, prints, self.config))  # report once
        return findings

    def _compare_batches(self) -> list[Finding]:
        findings: list[Finding] = []
        gathered = self._exchange({"digests": self._digests}, findings)
        if gathered is not None:
            digests = {r: (p or {}).get("digests") for r, p in gathered.items()}
            if sum(1 for d in digests.values() if d) < 2:
                findings.append(make_finding(
                    "MSD002", "MSD503 skipped: fewer than two ranks saw their batches "
                    "(`train_dataset_element` is empty in dataset sink mode).",
                    location={"check": "rank-batches"}, evidence={"codes": ["MSD503"]}))
            else:
                findings += self._judge("MSD503", lambda: rules.rank_data_duplication(digests, self._step, self.config))
        return findings

    # --- plumbing ---------------------------------------------------------------------------

    def _measure(self, findings: list[Finding], check: str, measure: Callable[[], Any]) -> Any:
        """The local payload; on failure an MSD001 and None, so this rank still enters the collective."""
        payload, failure = attempt(check, _CODES, measure, _STILL_IN_COLLECTIVES)  # the peers are waiting
        findings.extend([failure] if failure else [])
        return payload

    def _judge(self, code: str, rule: Callable[[], list[Finding]]) -> list[Finding]:
        found, failure = attempt(f"rule {code}", _CODES, rule, _STILL_IN_COLLECTIVES)  # only this rank is affected
        return found if failure is None else [failure]

    def _exchange(self, payload: Any, findings: list[Finding]) -> dict[int, Any] | None:
        """Every rank's decoded payload by rank (None where a rank sent nothing); None if the channel broke."""
        data = None
        if payload is not None:
            try:
                data = json.dumps(payload).encode()
            except (TypeError, ValueError) as exc:
                findings.append(internal_error("rank-payload", _CODES, exc, _STILL_IN_COLLECTIVES))
        result = self.channel.all_gather(data)
        if result is None:
            if self.channel.broken and not self._broken_reported:
                self._broken_reported = True
                findings.append(make_finding(
                    "MSD002",
                    f"{', '.join(_CODES)} stopped on rank {self.info.rank}: {self.channel.broken}. Training goes "
                    "on; this rank takes part in no further Doctor collective.",
                    location={"check": "rank-collectives"},
                    evidence={"codes": list(_CODES), "waited_s": round(self.channel.waited_s, 3),
                              "collective_timeout_s": self.config.collective_timeout_s, "step": self._step},
                    step=self._step or None))
            return None
        return {rank: None if raw is None else json.loads(raw.decode()) for rank, raw in enumerate(result.payloads)}

    def _not_measured(self, gathered: dict[int, Any], code: str) -> list[Finding]:
        missing = [r for r, p in gathered.items() if not p or "fp" not in p]
        if not missing:
            return []
        return [make_finding("MSD002", f"{code} could not compare ranks {missing}: they could not measure their "
                             "parameters (see their MSD001).", location={"check": "rank-fingerprint"},
                             evidence={"codes": [code], "ranks": missing})]


def _trained_parameters(cb_params: Any) -> list[Any]:
    """The weights the optimizer updates (not its own state: moments, step, learning rate)."""
    from mindspore import nn

    network = getattr(cb_params, "train_network", None) or cb_params.network
    optimizer = getattr(cb_params, "optimizer", None) or next(
        (cell for _, cell in network.cells_and_names() if isinstance(cell, nn.Optimizer)), None)
    return list(optimizer.parameters) if optimizer is not None else list(network.trainable_params())


def _batch_digests(batch: Any) -> list[str]:
    from mindspore_doctor.distributed.fingerprint import sample_digests

    return sample_digests(batch) if batch else []


def _array(payload: Any) -> np.ndarray | None:
    if not payload or "fp" not in payload:
        return None
    return np.asarray(payload["fp"], np.float64).reshape(-1, 5)
