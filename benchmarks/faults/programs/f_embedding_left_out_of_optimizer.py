"""Fault: a Transformer's optimizer is built from a hand-picked list of sub-modules that forgets the token embedding."""
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("nn.Adam(encoder + head + position params): net.embed's table is trainable but no optimizer "
                  "updates it", expect={"MSD102"}, arch="transformer", data="tokens", category="frozen-shared")

X, Y = kit.tokens(256, seed=0)


def train(callbacks):
    net = kit.TransformerClassifier()
    params = net.encoder.trainable_params() + net.fc.trainable_params() + [net.position]  # embed forgotten
    initial = net.embed.embedding_table.asnumpy().copy()
    outcome = kit.fit(net, kit.cross_entropy(), nn.Adam(params, learning_rate=1e-3), kit.dataset(X, Y), 1,
                      callbacks)
    outcome.extra["embedding_initial"] = initial
    return outcome


def effect(outcome):
    now = outcome.network.embed.embedding_table.asnumpy()
    assert np.array_equal(now, outcome.extra["embedding_initial"]), "the embedding trained"
