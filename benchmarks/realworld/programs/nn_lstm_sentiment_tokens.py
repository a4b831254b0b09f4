"""Sentiment classification of short reviews: nn.Embedding + 2-layer bidirectional nn.LSTM + nn.Dense on padded
token ids, BCEWithLogitsLoss, Adam, a hand-written PyNative loop.

Follows MindSpore's tutorial "RNN实现情感分类" (RNN sentiment classification,
mindspore-ai/docs tutorials/application/source_zh_cn/nlp/sentiment_analysis.ipynb, read through the search tool):
its ``RNN`` cell (Embedding with a given table and ``padding_idx``, ``nn.LSTM(batch_first=True,
bidirectional=True)``, the last layer's two final hidden states concatenated into a ``HeUniform(sqrt(5))``
Dense), its vocabulary (``text.Vocab.from_list(tokens, special_tokens=["<unk>", "<pad>"], special_first=False)``,
the unknown word's vector ``np.random.rand``, the pad vector zeros), its pipeline (``GeneratorDataset`` of
tokenised docs -> ``text.Lookup(unknown_token="<unk>")`` -> ``PadEnd`` with the pad id -> label ``TypeCast``
to float32 -> ``batch(64, drop_remainder=True)``) and its loop (``value_and_grad`` + ``optimizer(grads)``,
``model.set_train()`` each epoch, no ``set_context``: PyNative).

Offline and small: IMDB and GloVe are downloads, so the reviews are synthesised deterministically here (a
small English vocabulary, sentiment words of the review's class among neutral words, some words outside the
vocabulary that become ``<unk>``), and the "pretrained" table is a fixed random one at GloVe's scale
(std 0.4); 2 layers of 32 hidden units instead of 256, reviews padded to 24 tokens instead of 500.
"""
import math

import numpy as np
import mindspore as ms
import mindspore.dataset as ds
from mindspore import nn, ops
from mindspore.common.initializer import HeUniform, Uniform

from benchmarks.faults import kit
from benchmarks.realworld import corpus

FAULT = kit.Fault("healthy: the RNN sentiment tutorial's bidirectional LSTM on padded token ids", expect=(),
                  arch="lstm-text", data="reviews (synthetic tokens, vocabulary with <unk>/<pad>)",
                  category="healthy", mode="pynative")
LIBRARY = "mindspore.nn (MindSpore tutorial: RNN sentiment classification)"
COVERS = ("nn.Embedding with a given table and padding_idx", "bidirectional 2-layer nn.LSTM", "text.Lookup + PadEnd",
          "special ids <unk>/<pad>", "BCEWithLogitsLoss on float labels", "hand-written PyNative loop", "eval split")

POSITIVE = ("good great excellent wonderful amazing superb brilliant enjoyable moving beautiful fun charming "
            "delightful touching masterpiece funny clever gripping").split()
NEGATIVE = ("bad awful terrible boring dull poor weak waste worst stupid horrible mess tedious annoying "
            "predictable clumsy lifeless forgettable").split()
NEUTRAL = ("the a an this that film movie story plot actor actress director scene scenes music camera it is was "
           "and but of in on with for to as by its his her their character characters script ending end first "
           "time people life world man woman family night day after before about some very really quite just "
           "also even more most much so too then than when while where who which what watch watched seen see "
           "saw show shows think thought feel felt make made look looks seems seemed").split()
RARE = "zorblat quinch veltro maspen durnik ophrel".split()  # not in the vocabulary: looked up as <unk>
MAXLEN, EMBED_DIM, HIDDEN, LAYERS = 24, 32, 32, 2
EPOCHS, BATCH, LR = 5, 64, 3e-3


def reviews(n: int, seed: int) -> tuple[list[list[str]], list[list[int]]]:
    """``n`` tokenised reviews (8-30 words: longer ones are cut by PadEnd) and ``[label]`` rows, half positive."""
    r = np.random.default_rng(seed)
    docs, labels = [], []
    for i in range(n):
        label = i % 2
        own, other = (POSITIVE, NEGATIVE) if label else (NEGATIVE, POSITIVE)
        length = int(r.integers(8, 31))
        words = list(r.choice(NEUTRAL, length))
        for _ in range(int(r.integers(2, 5))):
            words[int(r.integers(0, min(length, MAXLEN)))] = str(r.choice(own))
        if r.random() < 0.4:
            words[int(r.integers(0, length))] = str(r.choice(other))
        if r.random() < 0.3:
            words[int(r.integers(0, length))] = str(r.choice(RARE))
        docs.append(words)
        labels.append([label])
    return docs, labels


class ReviewData:
    """The tutorial's ``IMDBData``: random access to (tokens, [label])."""

    def __init__(self, docs, labels):
        self.docs, self.labels = docs, labels

    def __getitem__(self, idx):
        return self.docs[idx], self.labels[idx]

    def __len__(self):
        return len(self.docs)


def load_glove_like(seed: int = 0):
    """``load_glove`` without the download: the vocabulary's words, a table at GloVe's scale, then <unk>, <pad>."""
    tokens = sorted(set(POSITIVE + NEGATIVE + NEUTRAL))
    r = np.random.default_rng(seed)
    embeddings = [r.normal(0.0, 0.4, EMBED_DIM).astype(np.float32) for _ in tokens]
    embeddings.append(r.random(EMBED_DIM))                    # <unk>: np.random.rand(100) in the tutorial
    embeddings.append(np.zeros((EMBED_DIM,), np.float32))     # <pad>
    vocab = ds.text.Vocab.from_list(tokens, special_tokens=["<unk>", "<pad>"], special_first=False)
    return vocab, np.array(embeddings).astype(np.float32)


VOCAB, EMBEDDINGS = load_glove_like()
PAD_IDX = VOCAB.tokens_to_ids("<pad>")
TRAIN_DOCS, TRAIN_LABELS = reviews(896, 0)
TEST_DOCS, TEST_LABELS = reviews(256, 1)


def pipeline(docs, labels, shuffle: bool) -> ds.Dataset:
    data = ds.GeneratorDataset(ReviewData(docs, labels), column_names=["text", "label"], shuffle=shuffle)
    lookup_op = ds.text.Lookup(VOCAB, unknown_token="<unk>")
    pad_op = ds.transforms.PadEnd([MAXLEN], pad_value=PAD_IDX)
    type_cast_op = ds.transforms.TypeCast(ms.float32)
    data = data.map(operations=[lookup_op, pad_op], input_columns=["text"])
    data = data.map(operations=[type_cast_op], input_columns=["label"])
    return data.batch(BATCH, drop_remainder=True)


def _ids(docs) -> np.ndarray:
    """What the pipeline makes of ``docs`` (for lint's sample inputs)."""
    unk = VOCAB.tokens_to_ids("<unk>")
    table = VOCAB.vocab()
    rows = [[table.get(w, unk) for w in doc[:MAXLEN]] + [PAD_IDX] * (MAXLEN - len(doc[:MAXLEN])) for doc in docs]
    return np.array(rows, np.int32)


class ReviewSplits(corpus.Data):
    """The tutorial's text pipeline for training and evaluation."""

    def train_dataset(self) -> ds.Dataset:
        return pipeline(TRAIN_DOCS, TRAIN_LABELS, shuffle=True)

    def eval_dataset(self) -> ds.Dataset:
        return pipeline(TEST_DOCS, TEST_LABELS, shuffle=False)


DATA = ReviewSplits(_ids(TRAIN_DOCS), np.array(TRAIN_LABELS, np.float32), EPOCHS, BATCH,
                    _ids(TEST_DOCS), np.array(TEST_LABELS, np.float32))


class RNN(nn.Cell):
    def __init__(self, embeddings, hidden_dim, output_dim, n_layers, bidirectional, pad_idx):
        super().__init__()
        vocab_size, embedding_dim = embeddings.shape
        self.embedding = nn.Embedding(vocab_size, embedding_dim, embedding_table=ms.Tensor(embeddings),
                                      padding_idx=pad_idx)
        self.rnn = nn.LSTM(embedding_dim, hidden_dim, num_layers=n_layers, bidirectional=bidirectional,
                           batch_first=True)
        weight_init = HeUniform(math.sqrt(5))
        bias_init = Uniform(1 / math.sqrt(hidden_dim * 2))
        self.fc = nn.Dense(hidden_dim * 2, output_dim, weight_init=weight_init, bias_init=bias_init)

    def construct(self, inputs):
        embedded = self.embedding(inputs)
        _, (hidden, _) = self.rnn(embedded)
        hidden = ops.concat((hidden[-2, :, :], hidden[-1, :, :]), axis=1)
        output = self.fc(hidden)
        return output


def recipe() -> corpus.Recipe:
    model = RNN(EMBEDDINGS, HIDDEN, 1, LAYERS, True, PAD_IDX)
    loss_fn = nn.BCEWithLogitsLoss(reduction="mean")
    optimizer = nn.Adam(model.trainable_params(), learning_rate=LR)
    return corpus.recipe(model, loss_fn, optimizer, metric="loss")


def binary_accuracy(model, dataset) -> float:
    """The tutorial's ``binary_accuracy`` over the eval split, in eval mode."""
    model.set_train(False)
    correct = total = 0
    for text, label in dataset.create_tuple_iterator():
        rounded = np.around(ops.sigmoid(model(text)).asnumpy())
        correct += int((rounded == label.asnumpy()).sum())
        total += len(rounded)
    return correct / total


def train(callbacks):
    """The tutorial's ``train_one_epoch`` loop; a Doctor among ``callbacks`` watches it with ``doctor.watch``."""
    from mindspore_doctor import Doctor

    setup = recipe()
    model, loss_fn, optimizer = setup.network, setup.loss_fn, setup.optimizer
    doctor = next((c for c in callbacks if isinstance(c, Doctor)), None)
    hooks = [c for c in callbacks if c is not doctor]

    def forward_fn(data, label):
        logits = model(data)
        loss = loss_fn(logits, label)
        return loss

    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters)

    def train_step(data, label):
        loss, grads = grad_fn(data, label)
        optimizer(grads)
        return loss

    train_dataset = DATA.train_dataset()
    losses = []
    with (doctor.watch(model, optimizer, loss_fn=loss_fn, train_dataset=train_dataset, epochs=EPOCHS)
          if doctor else _no_run()) as run:
        for _ in range(EPOCHS):
            model.set_train()
            for data, label in train_dataset.create_tuple_iterator():
                for hook in hooks:
                    hook.on_train_step_begin(None)
                loss = train_step(data, label)
                if run is not None:
                    run.step(loss, data, label)
                for hook in hooks:
                    hook.on_train_step_end(None)
                losses.append(float(loss.asnumpy()))
            if run is not None:
                run.epoch_end()
    return kit.Outcome(losses=losses, network=model,
                       metrics={"accuracy": binary_accuracy(model, DATA.eval_dataset())})


def _no_run():
    import contextlib

    return contextlib.nullcontext()


def effect(outcome):
    assert outcome.mean_loss(last=10) < 0.5 * outcome.mean_loss(first=10), outcome.losses[::10]
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
