"""The Doctor under msrun: rank awareness, cross-rank fingerprints, collectives that cannot hang."""
from mindspore_doctor.distributed.channel import RankChannel, RankInfo, rank_info
from mindspore_doctor.distributed.monitor import RankMonitor

__all__ = ["RankChannel", "RankInfo", "RankMonitor", "rank_info"]
