"""Fault: logits divided by temperature=0.01 where a CLIP-style multiplier 0.01 was meant: logits start 100x too large."""
from benchmarks.faults import kit

FAULT = kit.Fault("logits / 0.01 (x100) at init: the first loss is far above ln(4)", expect={"MSD215"},
                  accept={"MSD203", "MSD204", "MSD211"}, arch="lstm", data="sequences", category="initialisation")

X, Y = kit.sequences(512, seed=0)
XE, YE = kit.sequences(256, seed=1)


class TemperatureLSTM(kit.LSTMClassifier):
    def __init__(self, temperature=0.01):
        super().__init__()
        self.temperature = temperature

    def construct(self, x):
        return super().construct(x) / self.temperature


def train(callbacks):
    net = TemperatureLSTM()
    return kit.fit_functional(net, kit.cross_entropy(), kit.adam(net), kit.dataset(X, Y), 2, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    # a fresh 4-class classifier starts near ln(4) = 1.39; the loss must also be finite (this is not a NaN fault)
    assert 3 * 1.386 < outcome.first_loss < float("inf"), outcome.first_loss
