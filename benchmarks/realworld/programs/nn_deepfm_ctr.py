"""Click-through-rate prediction with DeepFM on field ids and values: numeric fields keep a fixed id and carry
their min-max scaled value, categorical fields carry a vocabulary id and the value 1.

Follows MindSpore's model zoo ``official/recommend/deepfm`` (mindspore-ai/models, read through the search tool):
``src/deepfm.py``'s ``DeepFMModel`` (first-order weights and the embedding table gathered by id and multiplied
by the value column, the FM term, five ``DenseLayer`` s of ``P.MatMul``/``P.BiasAdd``/``P.ReLU`` with
``Dropout(keep_prob=1.0)`` and the ``'normal'`` (std 0.01) initialisation, returning ``(out, fm_w,
embedding_table)``), ``NetWithLossClass`` (``SigmoidCrossEntropyWithLogits`` + an L2 term on both tables),
``TrainStepWrap`` (``Adam`` with ``loss_scale=1024`` and a ``GradOperation(sens_param=True)`` step),
``PredictWithSigmoid`` and ``AUCMetric`` for the eval network (its ``roc_auc_score`` written out in numpy:
scikit-learn is not in this environment); ``train.py`` (``Model(train_net,
eval_network=eval_net, metrics={"auc": auc_metric})``, GRAPH mode, ``convert_dtype`` off on CPU); and
``src/preprocess_data.py``'s id/value encoding (``cat2id``: numeric field i has id i and value ``val / max``,
a missing one value 0; a categorical field's frequent values get their own ids, the rest the field's OOV id,
all with value 1.0) and the ``feat_ids`` (int32) / ``feat_vals`` / ``label`` (float32, (batch, 1)) columns.

Offline and small: Criteo is a download, so 6 numeric and 8 categorical fields are synthesised
deterministically here (heavy-tailed counts with 10 % missing, Zipf-distributed categories, clicks drawn from
a logistic model with a few pairwise interactions, about 24 % positive); 14 fields instead of 39, 8-dim
embeddings and hidden layers of 64/32/32/16 instead of 80 and 1024/512/256/128, batches of 256 instead of
16000, and ``learning_rate=5e-3`` instead of 5e-4 so that 5 epochs of 4096 rows suffice.
"""
import numpy as np
import mindspore as ms
import mindspore.common.dtype as mstype
import mindspore.dataset as ds
from mindspore import nn, Tensor, ParameterTuple, Parameter
from mindspore.common.initializer import Uniform, initializer
from mindspore.nn import Dropout
from mindspore.nn.metrics import Metric
from mindspore.nn.optim import Adam
from mindspore.ops import composite as C
from mindspore.ops import functional as F
from mindspore.ops import operations as P
from mindspore.train import Model

from benchmarks.faults import kit
from benchmarks.realworld import corpus

FAULT = kit.Fault("healthy: model zoo DeepFM on field ids/values (numeric fields: fixed id, one-hot fields: value 1)",
                  expect=(), arch="deepfm", data="CTR rows (synthetic Criteo-like id/value pairs)",
                  category="healthy", fast=True)
LIBRARY = "mindspore.nn (MindSpore model zoo: official/recommend/deepfm)"
COVERS = ("embedding table gathered by id", "id/value column pairs", "FM second-order term", "P.* primitives",
          "loss-scaled Adam in a hand-written train cell", "L2 on embedding tables", "AUC eval network")

DENSE, SLOTS, THRESHOLD = 6, 8, 10
ROWS, EVAL_ROWS, BATCH, EPOCHS = 4096, 1024, 256, 5

np_type = np.float32
ms_type = mstype.float32


class Config:
    """The model zoo's ``default_config.yaml``, scaled down (see the module docstring)."""

    batch_size = BATCH
    data_field_size = DENSE + SLOTS
    data_vocab_size = None  # set from the encoding below
    data_emb_dim = 8
    deep_layer_args = [[64, 32, 32, 16], "relu"]
    init_args = [-0.01, 0.01]
    weight_bias_init = ['normal', 'normal']
    keep_prob = 0.9
    convert_dtype = False  # train.py: convert_dtype = device_target != "CPU"
    l2_coef = 8e-5
    learning_rate = 5e-3
    epsilon = 5e-8
    loss_scale = 1024.0


# --- data: Criteo-like raw rows, encoded as preprocess_data.py does ---------------------------------


def raw_rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Numeric values (NaN = missing), categorical values (strings), clicks; the click model is fixed (seed 7)."""
    r, truth = np.random.default_rng(seed), np.random.default_rng(7)
    cardinality = [4, 6, 10, 16, 25, 40, 60, 90]
    values = r.lognormal(mean=1.0, sigma=1.0, size=(n, DENSE)).round() * (1 + np.arange(DENSE))
    values[r.random((n, DENSE)) < 0.1] = np.nan
    cats = np.stack([np.minimum(r.zipf(1.6, n), c) - 1 for c in cardinality], axis=1)
    weights = [truth.normal(0, 1.0, c) for c in cardinality]
    pair = truth.normal(0, 1.0, (cardinality[0], cardinality[1]))
    logit = 0.4 + sum(w[cats[:, i]] for i, w in enumerate(weights)) + pair[cats[:, 0], cats[:, 1]]
    logit += 0.8 * np.log1p(np.nan_to_num(values[:, 0])) - 0.5 * np.log1p(np.nan_to_num(values[:, 2]))
    clicks = (r.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    return values, np.vectorize(lambda c: f"{c:x}")(cats + 1000 * np.arange(SLOTS)), clicks


class StatsDict:
    """``src/preprocess_data.py``'s ``StatsDict``: max per numeric column, counts per category, ``cat2id``."""

    def __init__(self, values, cats, threshold=THRESHOLD):
        self.val_cols = ["val_{}".format(i + 1) for i in range(DENSE)]
        self.cat_cols = ["cat_{}".format(i + 1) for i in range(SLOTS)]
        self.val_max_dict = {col: float(np.nanmax(values[:, i])) for i, col in enumerate(self.val_cols)}
        self.oov_prefix = "OOV"
        self.cat2id_dict = {col: i for i, col in enumerate(self.val_cols)}
        self.cat2id_dict.update({self.oov_prefix + col: i + len(self.val_cols) for i, col in enumerate(self.cat_cols)})
        for i, key in enumerate(self.cat_cols):
            found, counts = np.unique(cats[:, i], return_counts=True)
            for cat_str, count in zip(found, counts):
                if count > threshold:
                    self.cat2id_dict[key + "_" + cat_str] = len(self.cat2id_dict)

    def map_cat2id(self, values, cats):
        id_list, weight_list = [], []
        for i, val in enumerate(values):
            if np.isnan(val):
                id_list.append(i)
                weight_list.append(0)
            else:
                key = "val_{}".format(i + 1)
                id_list.append(self.cat2id_dict[key])
                weight_list.append(float(val) * 1.0 / self.val_max_dict[key])
        for i, cat_str in enumerate(cats):
            key = "cat_{}".format(i + 1) + "_" + cat_str
            id_list.append(self.cat2id_dict.get(key, self.cat2id_dict[self.oov_prefix + "cat_{}".format(i + 1)]))
            weight_list.append(1.0)
        return id_list, weight_list


def encode(stats, values, cats, clicks):
    pairs = [stats.map_cat2id(v, c) for v, c in zip(values, cats)]
    return (np.array([p[0] for p in pairs], np.int32), np.array([p[1] for p in pairs], np.float32),
            clicks.reshape(-1, 1).astype(np.float32))


_TRAIN_RAW, _EVAL_RAW = raw_rows(ROWS, 0), raw_rows(EVAL_ROWS, 1)
STATS = StatsDict(*_TRAIN_RAW[:2])
Config.data_vocab_size = len(STATS.cat2id_dict)
TRAIN = encode(STATS, *_TRAIN_RAW)
EVAL = encode(STATS, *_EVAL_RAW)


def create_dataset(ids, vals, labels, train_mode=True):
    """What the zoo's mindrecord pipeline yields: batches of feat_ids (int32), feat_vals, label (batch, 1)."""
    data_set = ds.NumpySlicesDataset({"feat_ids": ids, "feat_vals": vals, "label": labels}, shuffle=train_mode)
    return data_set.batch(BATCH, drop_remainder=True)


class CriteoLike(corpus.Data):
    def train_dataset(self) -> ds.Dataset:
        return create_dataset(*TRAIN, train_mode=True)

    def eval_dataset(self) -> ds.Dataset:
        return create_dataset(*EVAL, train_mode=False)

    def sample_inputs(self) -> tuple[ms.Tensor, ms.Tensor, ms.Tensor]:
        return tuple(ms.Tensor(a[:BATCH]) for a in TRAIN)


DATA = CriteoLike(TRAIN[0], TRAIN[2], EPOCHS, BATCH, EVAL[0], EVAL[2])


# --- src/deepfm.py ---------------------------------------------------------------------------------


class AUCMetric(Metric):
    """Metric method"""

    def __init__(self):
        super(AUCMetric, self).__init__()
        self.pred_probs = []
        self.true_labels = []

    def clear(self):
        self.pred_probs = []
        self.true_labels = []

    def update(self, *inputs):
        batch_predict = inputs[1].asnumpy()
        batch_label = inputs[2].asnumpy()
        self.pred_probs.extend(batch_predict.flatten().tolist())
        self.true_labels.extend(batch_label.flatten().tolist())

    def eval(self):
        if len(self.true_labels) != len(self.pred_probs):
            raise RuntimeError('true_labels.size() is not equal to pred_probs.size()')
        return roc_auc_score(self.true_labels, self.pred_probs)


def roc_auc_score(labels, scores) -> float:
    """``sklearn.metrics.roc_auc_score`` for binary labels (the rank statistic; scikit-learn is not installed here)."""
    labels, scores = np.asarray(labels) > 0.5, np.asarray(scores, np.float64)
    order = scores.argsort(kind="mergesort")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    for value in np.unique(scores[np.diff(np.sort(scores), prepend=np.nan) == 0]):  # ties share their mean rank
        ranks[scores == value] = ranks[scores == value].mean()
    positives, negatives = labels.sum(), (~labels).sum()
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def init_method(method, shape, name, max_val=1.0):
    if method in ['uniform']:
        params = Parameter(initializer(Uniform(max_val), shape, ms_type), name=name)
    elif method == "one":
        params = Parameter(initializer("ones", shape, ms_type), name=name)
    elif method == 'zero':
        params = Parameter(initializer("zeros", shape, ms_type), name=name)
    elif method == "normal":
        params = Parameter(Tensor(np.random.normal(loc=0.0, scale=0.01, size=shape).astype(dtype=np_type)), name=name)
    return params


def init_var_dict(init_args, var_list):
    """ init var with different methods. """
    var_map = {}
    _, max_val = init_args
    for i, _ in enumerate(var_list):
        key, shape, method = var_list[i]
        if key not in var_map.keys():
            if method in ['random', 'uniform']:
                var_map[key] = Parameter(initializer(Uniform(max_val), shape, ms_type), name=key)
            elif method == "one":
                var_map[key] = Parameter(initializer("ones", shape, ms_type), name=key)
            elif method == "zero":
                var_map[key] = Parameter(initializer("zeros", shape, ms_type), name=key)
            elif method == 'normal':
                var_map[key] = Parameter(Tensor(np.random.normal(loc=0.0, scale=0.01, size=shape).
                                                astype(dtype=np_type)), name=key)
    return var_map


class DenseLayer(nn.Cell):
    """Dense Layer for Deep Layer of WideDeep Model; Containing: activation, matmul, bias_add"""

    def __init__(self, input_dim, output_dim, weight_bias_init, act_str, scale_coef=1.0, convert_dtype=True,
                 use_act=True):
        super(DenseLayer, self).__init__()
        weight_init, bias_init = weight_bias_init
        self.weight = init_method(weight_init, [input_dim, output_dim], name="weight")
        self.bias = init_method(bias_init, [output_dim], name="bias")
        self.act_func = self._init_activation(act_str)
        self.matmul = P.MatMul(transpose_b=False)
        self.bias_add = P.BiasAdd()
        self.cast = P.Cast()
        self.dropout = Dropout(keep_prob=1.0)
        self.mul = P.Mul()
        self.realDiv = P.RealDiv()
        self.scale_coef = scale_coef
        self.convert_dtype = convert_dtype
        self.use_act = use_act

    def _init_activation(self, act_str):
        act_str = act_str.lower()
        if act_str == "relu":
            act_func = P.ReLU()
        elif act_str == "sigmoid":
            act_func = P.Sigmoid()
        elif act_str == "tanh":
            act_func = P.Tanh()
        return act_func

    def construct(self, x):
        x = self.dropout(x)
        if self.convert_dtype:
            x = self.cast(x, mstype.float16)
            weight = self.cast(self.weight, mstype.float16)
            bias = self.cast(self.bias, mstype.float16)
            wx = self.matmul(x, weight)
            wx = self.bias_add(wx, bias)
            if self.use_act:
                wx = self.act_func(wx)
            wx = self.cast(wx, mstype.float32)
        else:
            wx = self.matmul(x, self.weight)
            wx = self.bias_add(wx, self.bias)
            if self.use_act:
                wx = self.act_func(wx)
        return wx


class DeepFMModel(nn.Cell):
    """From paper: "DeepFM: A Factorization-Machine based Neural Network for CTR Prediction" """

    def __init__(self, config):
        super(DeepFMModel, self).__init__()
        self.batch_size = config.batch_size
        self.field_size = config.data_field_size
        self.vocab_size = config.data_vocab_size
        self.emb_dim = config.data_emb_dim
        self.deep_layer_dims_list, self.deep_layer_act = config.deep_layer_args
        self.init_args = config.init_args
        self.weight_bias_init = config.weight_bias_init
        self.keep_prob = config.keep_prob
        convert_dtype = config.convert_dtype
        init_acts = [('W_l2', [self.vocab_size, 1], 'normal'),
                     ('V_l2', [self.vocab_size, self.emb_dim], 'normal')]
        var_map = init_var_dict(self.init_args, init_acts)
        self.fm_w = var_map["W_l2"]
        self.embedding_table = var_map["V_l2"]
        # Deep Layers
        self.deep_input_dims = self.field_size * self.emb_dim
        self.all_dim_list = [self.deep_input_dims] + self.deep_layer_dims_list + [1]
        self.dense_layer_1 = DenseLayer(self.all_dim_list[0], self.all_dim_list[1], self.weight_bias_init,
                                        self.deep_layer_act, self.keep_prob, convert_dtype=convert_dtype)
        self.dense_layer_2 = DenseLayer(self.all_dim_list[1], self.all_dim_list[2], self.weight_bias_init,
                                        self.deep_layer_act, self.keep_prob, convert_dtype=convert_dtype)
        self.dense_layer_3 = DenseLayer(self.all_dim_list[2], self.all_dim_list[3], self.weight_bias_init,
                                        self.deep_layer_act, self.keep_prob, convert_dtype=convert_dtype)
        self.dense_layer_4 = DenseLayer(self.all_dim_list[3], self.all_dim_list[4], self.weight_bias_init,
                                        self.deep_layer_act, self.keep_prob, convert_dtype=convert_dtype)
        self.dense_layer_5 = DenseLayer(self.all_dim_list[4], self.all_dim_list[5], self.weight_bias_init,
                                        self.deep_layer_act, self.keep_prob, convert_dtype=convert_dtype,
                                        use_act=False)
        # FM, linear Layers
        self.Gatherv2 = P.Gather()
        self.Mul = P.Mul()
        self.ReduceSum = P.ReduceSum(keep_dims=False)
        self.Reshape = P.Reshape()
        self.Square = P.Square()
        self.Shape = P.Shape()
        self.Tile = P.Tile()
        self.Concat = P.Concat(axis=1)
        self.Cast = P.Cast()

    def construct(self, id_hldr, wt_hldr):
        """id_hldr: batch ids [bs, field_size]; wt_hldr: batch weights [bs, field_size]"""
        mask = self.Reshape(wt_hldr, (self.batch_size, self.field_size, 1))
        # Linear layer
        fm_id_weight = self.Gatherv2(self.fm_w, id_hldr, 0)
        wx = self.Mul(fm_id_weight, mask)
        linear_out = self.ReduceSum(wx, 1)
        # FM layer
        fm_id_embs = self.Gatherv2(self.embedding_table, id_hldr, 0)
        vx = self.Mul(fm_id_embs, mask)
        v1 = self.ReduceSum(vx, 1)
        v1 = self.Square(v1)
        v2 = self.Square(vx)
        v2 = self.ReduceSum(v2, 1)
        fm_out = 0.5 * self.ReduceSum(v1 - v2, 1)
        fm_out = self.Reshape(fm_out, (-1, 1))
        # Deep layer
        deep_in = self.Reshape(vx, (-1, self.field_size * self.emb_dim))
        deep_in = self.dense_layer_1(deep_in)
        deep_in = self.dense_layer_2(deep_in)
        deep_in = self.dense_layer_3(deep_in)
        deep_in = self.dense_layer_4(deep_in)
        deep_out = self.dense_layer_5(deep_in)
        out = linear_out + fm_out + deep_out
        return out, self.fm_w, self.embedding_table


class NetWithLossClass(nn.Cell):
    """NetWithLossClass definition"""

    def __init__(self, network, l2_coef=1e-6):
        super(NetWithLossClass, self).__init__(auto_prefix=False)
        self.loss = P.SigmoidCrossEntropyWithLogits()
        self.network = network
        self.l2_coef = l2_coef
        self.Square = P.Square()
        self.ReduceMean_false = P.ReduceMean(keep_dims=False)
        self.ReduceSum_false = P.ReduceSum(keep_dims=False)

    def construct(self, batch_ids, batch_wts, label):
        predict, fm_id_weight, fm_id_embs = self.network(batch_ids, batch_wts)
        log_loss = self.loss(predict, label)
        mean_log_loss = self.ReduceMean_false(log_loss)
        l2_loss_w = self.ReduceSum_false(self.Square(fm_id_weight))
        l2_loss_v = self.ReduceSum_false(self.Square(fm_id_embs))
        l2_loss_all = self.l2_coef * (l2_loss_v + l2_loss_w) * 0.5
        loss = mean_log_loss + l2_loss_all
        return loss


class TrainStepWrap(nn.Cell):
    """TrainStepWrap definition (the zoo's, without its data-parallel gradient reducer)"""

    def __init__(self, network, lr, eps, loss_scale=1000.0):
        super(TrainStepWrap, self).__init__(auto_prefix=False)
        self.network = network
        self.network.set_train()
        self.weights = ParameterTuple(network.trainable_params())
        self.optimizer = Adam(self.weights, learning_rate=lr, eps=eps, loss_scale=loss_scale)
        self.hyper_map = C.HyperMap()
        self.grad = C.GradOperation(get_by_list=True, sens_param=True)
        self.sens = loss_scale

    def construct(self, batch_ids, batch_wts, label):
        weights = self.weights
        loss = self.network(batch_ids, batch_wts, label)
        sens = P.Fill()(P.DType()(loss), P.Shape()(loss), self.sens)
        grads = self.grad(self.network, weights)(batch_ids, batch_wts, label, sens)
        return F.depend(loss, self.optimizer(grads))


class PredictWithSigmoid(nn.Cell):
    """Predict method"""

    def __init__(self, network):
        super(PredictWithSigmoid, self).__init__(auto_prefix=False)
        self.network = network
        self.sigmoid = P.Sigmoid()

    def construct(self, batch_ids, batch_wts, labels):
        logits, _, _, = self.network(batch_ids, batch_wts)
        pred_probs = self.sigmoid(logits)
        return logits, pred_probs, labels


def get_train_eval_net(config):
    """``ModelBuilder.get_train_eval_net``"""
    deepfm_net = DeepFMModel(config)
    loss_net = NetWithLossClass(deepfm_net, l2_coef=config.l2_coef)
    train_net = TrainStepWrap(loss_net, lr=config.learning_rate, eps=config.epsilon, loss_scale=config.loss_scale)
    eval_net = PredictWithSigmoid(deepfm_net)
    return deepfm_net, train_net, eval_net


def recipe() -> corpus.Recipe:
    deepfm_net, train_net, eval_net = get_train_eval_net(Config)
    model = Model(train_net, eval_network=eval_net, metrics={"auc": AUCMetric()})
    return corpus.Recipe(deepfm_net, None, train_net.optimizer, model)


def train(callbacks):
    return corpus.fit(recipe(), DATA, callbacks)


def effect(outcome):
    assert outcome.mean_loss(last=10) < 0.85 * outcome.mean_loss(first=10), outcome.losses[::8]
    assert outcome.metrics["auc"] > 0.75, outcome.metrics
