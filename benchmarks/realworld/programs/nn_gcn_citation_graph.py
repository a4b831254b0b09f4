"""Semi-supervised node classification with a 2-layer GCN on a small citation-like graph: dense normalised
adjacency, bag-of-words node features, train/eval/test masks, the masked loss normalised by ``mean(mask)``, one
full-graph step per epoch in a hand-written loop whose train cell returns ``(loss, accuracy)``.

Follows MindSpore's model zoo ``official/gnn/GCN`` (mindspore-ai/models, read through the search tool):
``src/gcn.py`` (``glorot`` initial weights, ``GraphConvolution`` = Dropout -> Dense without bias -> ``P.MatMul``
with the adjacency -> activation, ``GCN`` of two such layers), ``src/metrics.py`` (``Loss``: softmax cross-entropy
per node, weight decay through ``P.L2Loss`` on the first layer's weight, ``mask / mean(mask)`` then the mean;
``Accuracy`` with the same mask; ``LossAccuracyWrapper``, ``LossWrapper``, its own ``TrainOneStepCell`` and
``TrainNetWrapper`` returning ``(loss, accuracy)``), ``train.py``'s ``run_train`` (GRAPH mode, masks from
``get_mask``, ``train_net.set_train()`` then ``train_net(adj, feature)`` once per epoch, evaluation with
``eval_net.set_train(False)``, early stopping on the eval loss) and ``src/config.py``'s ``ConfigGCN`` (lr 0.01,
hidden 16, dropout 0.5, weight decay 5e-4, early stopping 10). The zoo also sets ``add_flags_recursive(fp16=True)``
for Ascend; it is left out on CPU.

Offline and small: Cora is a download, so a 600-node citation-like graph is synthesised deterministically here
(7 topics, a stochastic block model with about 2 links per paper, 82 % of them within the topic, binary
300-word bag-of-words features drawn from topic-dependent word rates), preprocessed as the GCN paper does
(row-normalised features, ``D^-1/2 (A + I) D^-1/2``); 70 training, 150 validation and 300 test nodes,
100 epochs instead of 200.
"""
import numpy as np
import mindspore as ms
import mindspore.dataset as ds
from mindspore import Tensor, nn
from mindspore.common import dtype as mstype
from mindspore.common.parameter import ParameterTuple
from mindspore.nn.layer.activation import get_activation
from mindspore.ops import composite as C
from mindspore.ops import functional as F
from mindspore.ops import operations as P

from benchmarks.faults import kit
from benchmarks.realworld import corpus

FAULT = kit.Fault("healthy: model zoo GCN on a citation-like graph, masked loss normalised by mean(mask)", expect=(),
                  arch="gcn", data="graph (synthetic citation-like, node masks)", category="healthy", fast=True,
                  deterministic=False)  # CPU Dropout: not bit-for-bit repeatable even without the Doctor
LIBRARY = "mindspore.nn (MindSpore model zoo: official/gnn/GCN)"
COVERS = ("dense normalised adjacency", "P.MatMul graph convolution", "train/eval/test node masks",
          "loss * mask / mean(mask)", "P.L2Loss weight decay", "train cell returning (loss, accuracy)",
          "full-graph step, no dataset", "early stopping")

NODES, CLASSES, WORDS = 600, 7, 300
TRAIN_NODES, EVAL_NODES, TEST_NODES = 70, 150, 300


class ConfigGCN:
    """The zoo's ``src/config.py``, with fewer epochs."""

    learning_rate = 0.01
    epochs = 100
    hidden1 = 16
    dropout = 0.5
    weight_decay = 5e-4
    early_stopping = 10


def citation_graph(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """adjacency (normalised, dense), features (row-normalised), one-hot labels, labels."""
    r = np.random.default_rng(seed)
    label = r.integers(0, CLASSES, NODES)
    same = label[:, None] == label[None, :]
    p = np.where(same, 0.85 * 4 / (NODES / CLASSES), 0.15 * 4 / (NODES - NODES / CLASSES)) / 2
    upper = np.triu(r.random((NODES, NODES)) < p, 1)
    a = (upper | upper.T).astype(np.float32)
    topic_rates = r.gamma(0.3, 0.1, (CLASSES, WORDS))
    features = (r.random((NODES, WORDS)) < np.minimum(topic_rates[label] + 0.01, 0.6)).astype(np.float32)
    features /= np.maximum(features.sum(1, keepdims=True), 1.0)
    a_hat = a + np.eye(NODES, dtype=np.float32)
    d = 1.0 / np.sqrt(a_hat.sum(1))
    adj = (a_hat * d[:, None] * d[None, :]).astype(np.float32)
    return adj, features, np.eye(CLASSES, dtype=np.float32)[label], label.astype(np.int32)


def get_mask(total, begin, end):
    """Generate mask."""
    mask = np.zeros([total]).astype(np.float32)
    mask[begin:end] = 1
    return np.array(mask, dtype=np.bool_)


ADJ, FEATURE, LABEL_ONEHOT, LABEL = citation_graph()
TRAIN_MASK = get_mask(NODES, 0, TRAIN_NODES)
EVAL_MASK = get_mask(NODES, TRAIN_NODES, TRAIN_NODES + EVAL_NODES)
TEST_MASK = get_mask(NODES, NODES - TEST_NODES, NODES)


class WholeGraph(corpus.Data):
    """One element: the whole graph (the zoo's loop passes ``adj, feature`` tensors; no dataset)."""

    def train_dataset(self) -> ds.Dataset:
        return ds.NumpySlicesDataset({"adj": ADJ[None], "feature": FEATURE[None]}, shuffle=False)

    def eval_dataset(self) -> None:
        return None

    def sample_inputs(self) -> tuple[ms.Tensor, ms.Tensor, ms.Tensor]:
        return ms.Tensor(ADJ), ms.Tensor(FEATURE), ms.Tensor(LABEL)


DATA = WholeGraph(FEATURE, LABEL, ConfigGCN.epochs, NODES)


# --- src/gcn.py ------------------------------------------------------------------------------------


def glorot(shape):
    init_range = np.sqrt(6.0 / (shape[0] + shape[1]))
    initial = np.random.uniform(-init_range, init_range, shape).astype(np.float32)
    return Tensor(initial)


class GraphConvolution(nn.Cell):
    """GCN graph convolution layer."""

    def __init__(self, feature_in_dim, feature_out_dim, dropout_ratio=None, activation=None):
        super(GraphConvolution, self).__init__()
        self.in_dim = feature_in_dim
        self.out_dim = feature_out_dim
        self.weight_init = glorot([self.out_dim, self.in_dim])
        self.fc = nn.Dense(self.in_dim, self.out_dim, weight_init=self.weight_init, has_bias=False)
        self.dropout_ratio = dropout_ratio
        if self.dropout_ratio is not None:
            self.dropout = nn.Dropout(keep_prob=1 - self.dropout_ratio)
        self.dropout_flag = self.dropout_ratio is not None
        self.activation = get_activation(activation)
        self.activation_flag = self.activation is not None
        self.matmul = P.MatMul()

    def construct(self, adj, input_feature):
        dropout = input_feature
        if self.dropout_flag:
            dropout = self.dropout(dropout)
        fc = self.fc(dropout)
        output_feature = self.matmul(adj, fc)
        if self.activation_flag:
            output_feature = self.activation(output_feature)
        return output_feature


class GCN(nn.Cell):
    """GCN architecture."""

    def __init__(self, config, input_dim, output_dim):
        super(GCN, self).__init__()
        self.layer0 = GraphConvolution(input_dim, config.hidden1, activation="relu", dropout_ratio=config.dropout)
        self.layer1 = GraphConvolution(config.hidden1, output_dim, dropout_ratio=None)

    def construct(self, adj, feature):
        output0 = self.layer0(adj, feature)
        output1 = self.layer1(adj, output0)
        return output1


# --- src/metrics.py --------------------------------------------------------------------------------


class Loss(nn.Cell):
    """Softmax cross-entropy loss with masking."""

    def __init__(self, label, mask, weight_decay, param):
        super(Loss, self).__init__(auto_prefix=False)
        self.label = Tensor(label)
        self.mask = Tensor(mask)
        self.loss = P.SoftmaxCrossEntropyWithLogits()
        self.one = Tensor(1.0, mstype.float32)
        self.zero = Tensor(0.0, mstype.float32)
        self.mean = P.ReduceMean()
        self.cast = P.Cast()
        self.l2_loss = P.L2Loss()
        self.reduce_sum = P.ReduceSum()
        self.weight_decay = weight_decay
        self.param = param

    def construct(self, preds):
        param = self.l2_loss(self.param)
        loss = self.weight_decay * param
        preds = self.cast(preds, mstype.float32)
        loss = loss + self.loss(preds, self.label)[0]
        mask = self.cast(self.mask, mstype.float32)
        mask_reduce = self.mean(mask)
        mask = mask / mask_reduce
        loss = loss * mask
        loss = self.mean(loss)
        return loss


class Accuracy(nn.Cell):
    """Accuracy with masking."""

    def __init__(self, label, mask):
        super(Accuracy, self).__init__(auto_prefix=False)
        self.label = Tensor(label)
        self.mask = Tensor(mask)
        self.equal = P.Equal()
        self.argmax = P.Argmax()
        self.cast = P.Cast()
        self.mean = P.ReduceMean()

    def construct(self, preds):
        preds = self.cast(preds, mstype.float32)
        correct_prediction = self.equal(self.argmax(preds), self.argmax(self.label))
        accuracy_all = self.cast(correct_prediction, mstype.float32)
        mask = self.cast(self.mask, mstype.float32)
        mask_reduce = self.mean(mask)
        mask = mask / mask_reduce
        accuracy_all *= mask
        return self.mean(accuracy_all)


class LossAccuracyWrapper(nn.Cell):
    """Wraps the GCN model with loss and accuracy cell."""

    def __init__(self, network, label, mask, weight_decay):
        super(LossAccuracyWrapper, self).__init__(auto_prefix=False)
        self.network = network
        self.loss = Loss(label, mask, weight_decay, network.trainable_params()[0])
        self.accuracy = Accuracy(label, mask)

    def construct(self, adj, feature):
        preds = self.network(adj, feature)
        loss = self.loss(preds)
        accuracy = self.accuracy(preds)
        return loss, accuracy


class LossWrapper(nn.Cell):
    """Wraps the GCN model with loss."""

    def __init__(self, network, label, mask, weight_decay):
        super(LossWrapper, self).__init__(auto_prefix=False)
        self.network = network
        self.loss = Loss(label, mask, weight_decay, network.trainable_params()[0])

    def construct(self, adj, feature):
        preds = self.network(adj, feature)
        loss = self.loss(preds)
        return loss


class TrainOneStepCell(nn.Cell):
    """Network training package class (the zoo's: trained without a dataset, on ``adj, feature``)."""

    def __init__(self, network, optimizer, sens=1.0):
        super(TrainOneStepCell, self).__init__(auto_prefix=False)
        self.network = network
        self.network.set_grad()
        self.network.add_flags(defer_inline=True)
        self.weights = ParameterTuple(network.trainable_params())
        self.optimizer = optimizer
        self.grad = C.GradOperation(get_by_list=True, sens_param=True)
        self.sens = sens

    def construct(self, adj, feature):
        weights = self.weights
        loss = self.network(adj, feature)
        sens = P.Fill()(P.DType()(loss), P.Shape()(loss), self.sens)
        grads = self.grad(self.network, weights)(adj, feature, sens)
        return F.depend(loss, self.optimizer(grads))


class TrainNetWrapper(nn.Cell):
    """Wraps the GCN model with optimizer."""

    def __init__(self, network, label, mask, config):
        super(TrainNetWrapper, self).__init__(auto_prefix=False)
        self.network = network
        loss_net = LossWrapper(network, label, mask, config.weight_decay)
        optimizer = nn.Adam(loss_net.trainable_params(), learning_rate=config.learning_rate)
        self.loss_train_net = TrainOneStepCell(loss_net, optimizer)
        self.accuracy = Accuracy(label, mask)

    def construct(self, adj, feature):
        loss = self.loss_train_net(adj, feature)
        accuracy = self.accuracy(self.network(adj, feature))
        return loss, accuracy


def recipe() -> corpus.Recipe:
    config = ConfigGCN()
    gcn_net = GCN(config, WORDS, CLASSES)
    train_net = TrainNetWrapper(gcn_net, LABEL_ONEHOT, TRAIN_MASK, config)
    return corpus.Recipe(gcn_net, None, train_net.loss_train_net.optimizer, ms.Model(train_net))


def train(callbacks):
    """``train.py``'s ``run_train`` loop; a Doctor among ``callbacks`` watches the train cell (``doctor.watch``)."""
    import contextlib

    from mindspore_doctor import Doctor

    config = ConfigGCN()
    setup = recipe()
    gcn_net, train_net = setup.network, setup.model._train_network  # pylint: disable=protected-access
    doctor = next((c for c in callbacks if isinstance(c, Doctor)), None)
    hooks = [c for c in callbacks if c is not doctor]
    adj, feature = Tensor(ADJ), Tensor(FEATURE)
    eval_net = LossAccuracyWrapper(gcn_net, LABEL_ONEHOT, EVAL_MASK, config.weight_decay)
    losses, loss_list = [], []
    with (doctor.watch(train_net, epochs=config.epochs) if doctor else contextlib.nullcontext()) as run:
        for epoch in range(config.epochs):
            for hook in hooks:
                hook.on_train_step_begin(None)
            train_net.set_train()
            train_result = train_net(adj, feature)
            if run is not None:
                run.step(train_result)
            for hook in hooks:
                hook.on_train_step_end(None)
            losses.append(float(train_result[0].asnumpy()))
            eval_net.set_train(False)
            eval_loss = eval_net(adj, feature)[0].asnumpy()
            loss_list.append(eval_loss)
            if run is not None:
                run.epoch_end()
            if epoch > config.early_stopping and loss_list[-1] > np.mean(loss_list[-(config.early_stopping + 1):-1]):
                break
    test_net = LossAccuracyWrapper(gcn_net, LABEL_ONEHOT, TEST_MASK, config.weight_decay)
    test_net.set_train(False)
    test_loss, test_accuracy = (t.asnumpy() for t in test_net(adj, feature))
    return kit.Outcome(losses=losses, network=gcn_net,
                       metrics={"test_loss": float(test_loss), "test_accuracy": float(test_accuracy)},
                       extra={"epochs": len(losses)})


def effect(outcome):
    assert outcome.mean_loss(last=10) < 0.5 * outcome.mean_loss(first=10), outcome.losses[::10]
    assert outcome.metrics["test_accuracy"] > 0.7, outcome.metrics
