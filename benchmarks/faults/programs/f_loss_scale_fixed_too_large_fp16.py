"""Fault: a float16 MLP trained with a fixed loss scale of 2**20 copied from an Ascend script: every step overflows."""
import mindspore as ms
import numpy as np
from mindspore import nn, ops
from mindspore.train import Model

from benchmarks.faults import kit

FAULT = kit.Fault("fixed scale_sense=2**20 on a float16 network (float16 max 65504): all updates are skipped",
                  expect={"MSD112", "MSD214"}, accept={"MSD203", "MSD209"}, arch="mlp", data="tabular",
                  category="optimizer")

X, Y = kit.tabular(512, seed=0)


class CPULossScaleCell(nn.TrainOneStepWithLossScaleCell):
    """The stock overflow check reads an Ascend status register; on CPU, test the gradients for Inf/NaN instead."""

    def get_overflow_status(self, status, compute_output):
        overflow = ops.zeros((), ms.bool_)
        for grad in compute_output:
            overflow = ops.logical_or(overflow, ops.logical_not(ops.isfinite(grad).all()))
        return overflow


def train(callbacks):
    net = kit.MLP()
    net.to_float(ms.float16)
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9)
    cell = CPULossScaleCell(nn.WithLossCell(net, kit.cross_entropy()), opt,
                            scale_sense=ms.Tensor(2.0 ** 20, ms.float32))
    weights_at_start = net.head.weight.asnumpy().copy()
    outcome = kit.fit(net, None, None, kit.dataset(X, Y), 2, callbacks, model=Model(cell))
    outcome.extra["weights_at_start"] = weights_at_start
    return outcome


def effect(outcome):
    # every update was dropped: the weights are still their init
    assert np.array_equal(outcome.extra["weights_at_start"], outcome.network.head.weight.asnumpy())
