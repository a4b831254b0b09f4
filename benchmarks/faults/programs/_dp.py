"""Shared by the 2-rank data-parallel programs (launched by msrun): communication set-up and cross-rank checks."""
import mindspore as ms
import numpy as np
from mindspore import Tensor, ops
from mindspore.communication import get_group_size, get_rank, init
from mindspore.communication.management import GlobalComm
from mindspore.context import ParallelMode


def setup() -> tuple[int, int]:
    """``init()`` (once per process) and data-parallel mode with averaged gradients; returns (rank, world size)."""
    if not GlobalComm.INITED:
        init()
    ms.set_auto_parallel_context(parallel_mode=ParallelMode.DATA_PARALLEL, gradients_mean=True)
    return get_rank(), get_group_size()


def gather(values) -> np.ndarray:
    """Every rank's float vector, stacked in rank order: (world size, len(values)). A collective: all ranks call it."""
    return ops.AllGather()(Tensor(np.asarray(values, np.float32).reshape(1, -1))).asnumpy()


def weight_sums(net) -> list[float]:
    """A per-parameter checksum (sum of absolute values) of the trainable weights."""
    return [float(np.abs(p.asnumpy()).sum()) for p in net.trainable_params()]


def rank_spread(values) -> float:
    """Largest relative difference between the ranks' vectors (0.0: all ranks hold the same values)."""
    rows = gather(values).astype(np.float64)
    return float((np.abs(rows - rows[0]) / np.maximum(np.abs(rows[0]), 1e-12)).max())


def dataset(x: np.ndarray, y: np.ndarray, batch: int = 32, shard: bool = True) -> ms.dataset.Dataset:
    """``kit.dataset`` read through this rank's shard (``num_shards``/``shard_id``), or unsharded."""
    shards = {"num_shards": get_group_size(), "shard_id": get_rank()} if shard else {}
    return ms.dataset.NumpySlicesDataset({"x": x, "label": y}, shuffle=True, **shards).batch(batch, drop_remainder=True)
