"""Fault: 2-rank data-parallel MLP with a hand-written clipping train step that never all-reduces its gradients."""
from mindspore import nn, ops
from mindspore.train import Model

from benchmarks.faults import kit
from benchmarks.faults.programs import _dp

FAULT = kit.Fault("custom TrainOneStepCell.construct skips self.grad_reducer: each rank applies its own gradients",
                  expect={"MSD502"}, arch="mlp", data="tabular", category="distributed", onset_step=2,
                  launcher="msrun")

X, Y = kit.tabular(1024, seed=0, noise=1.0)


class ClippedTrainStep(nn.TrainOneStepCell):
    """TrainOneStepCell with global-norm gradient clipping."""

    def construct(self, *inputs):
        loss = self.network(*inputs)
        sens = ops.fill(loss.dtype, loss.shape, self.sens)
        grads = self.grad(self.network, self.weights)(*inputs, sens)
        grads = ops.clip_by_global_norm(grads, 1.0)
        return ops.depend(loss, self.optimizer(grads))


def train(callbacks):
    _dp.setup()
    net = kit.MLP()
    model = Model(ClippedTrainStep(nn.WithLossCell(net, kit.cross_entropy()), kit.momentum(net)))
    return kit.fit(net, None, None, _dp.dataset(X, Y), 4, callbacks, model=model)


def effect(outcome):
    # every rank steps on its own shard's gradients: the replicas are different models by the end
    spread = _dp.rank_spread(_dp.weight_sums(outcome.network))
    assert spread > 1e-3, spread
