"""Named-entity tagging (B/I/O) with a BiLSTM + CRF whose loss is the masked mean negative log-likelihood over
valid tokens (``llh.sum() / mask.sum()``), trained by calling a ``TrainOneStepCell`` by hand, never ``set_train()``.

Follows MindSpore's tutorial "LSTM+CRF序列标注" (BiLSTM-CRF sequence labelling,
mindspore-ai/docs tutorials/application/source_zh_cn/nlp/sequence_labeling.ipynb, read through the search tool):
its ``compute_score`` / ``compute_normalizer`` / ``viterbi_decode`` / ``post_decode``, its ``CRF`` cell
(``sequence_mask`` from ``seq_length``, ``Uniform(0.1)`` transitions, reductions ``sum``/``mean``/``token_mean``;
this program picks ``token_mean``, the per-token mean the tutorial's CRF offers), its ``BiLSTM_CRF``
(``nn.Embedding(padding_idx=0)`` -> ``nn.LSTM(bidirectional=True, batch_first=True)`` with ``seq_length`` ->
``nn.Dense(..., 'he_uniform')`` -> CRF, the loss computed inside the network), its data preparation
(``<pad>`` id 0, padded tags ``O``, int64 ids, tags and lengths), ``nn.SGD(lr=0.01, weight_decay=1e-4)`` wrapped in
``nn.TrainOneStepCell(model, optimizer)`` and called in a plain loop without ``set_train()`` (the tutorial never
calls it: there is no BatchNorm or Dropout). The tutorial sets no mode and pre-compiles the step
(``train_one_step.compile(...)``): it was written for MindSpore 1.8, whose default was GRAPH mode, so this program
runs in GRAPH mode (in PyNative its Python loops over the sequence make each step several seconds on 2 cores).

Offline and small: the tutorial trains on two sentences; here 480 short sentences are synthesised
deterministically (place and organisation names of 1-3 words among everyday words, padded to 12 tokens) and
batched by 16 with ``NumpySlicesDataset``, 4 epochs. SGD's learning rate is 1.0 instead of 0.01: the
tutorial's loss (``reduction='sum'``) is the sum over its sentences, this one the mean over a batch's ~110 valid
tokens, so the tutorial's 0.01 on a sum over a batch of this size is 1.1 on the token mean.
"""
import numpy as np
import mindspore as ms
import mindspore.dataset as ds
import mindspore.nn as nn
import mindspore.numpy as mnp
from mindspore.common.initializer import initializer, Uniform

from benchmarks.faults import kit
from benchmarks.realworld import corpus

FAULT = kit.Fault("healthy: the BiLSTM-CRF tutorial's tagger, masked mean NLL, trained without set_train()",
                  expect=(), arch="bilstm-crf", data="tagged sentences (synthetic tokens, B/I/O)",
                  category="healthy")
LIBRARY = "mindspore.nn (MindSpore tutorial: LSTM+CRF sequence labelling)"
COVERS = ("CRF loss inside the network", "masked mean llh.sum() / mask.sum()", "nn.LSTM with seq_length",
          "TrainOneStepCell called by hand", "no set_train() (no mode-dependent cell)", "3 input columns")

PLACES = ["beijing", "shanghai", "new york", "san francisco", "hong kong", "rio de janeiro", "paris", "tokyo",
          "cape town", "buenos aires", "chongqing", "los angeles"]
ORGS = ["tsinghua university", "peking university", "huawei", "world health organization", "united nations",
        "red cross", "national museum", "city library"]
WORDS = ("i we they she he visited went to live lives in from the a is was big old new city place famous "
         "school work works at near last year this summer many people like likes love go back home far "
         "very nice and with by my our friend friends study studies").split()
TEMPLATES = [["i", "visited", "E", "last", "year"], ["we", "live", "in", "E"], ["she", "works", "at", "E"],
             ["E", "is", "a", "big", "city"], ["they", "went", "to", "E", "this", "summer"],
             ["my", "friend", "studies", "at", "E"], ["many", "people", "like", "E"],
             ["he", "lives", "near", "E", "and", "works", "in", "E"]]
MAXLEN, EMBEDDING_DIM, HIDDEN_DIM = 12, 16, 32
EPOCHS, BATCH, LR = 4, 16, 1.0

tag_to_idx = {"B": 0, "I": 1, "O": 2}
word_to_idx = {"<pad>": 0}
for _word in WORDS + [w for name in PLACES + ORGS for w in name.split()]:
    word_to_idx.setdefault(_word, len(word_to_idx))


def sentences(n: int, seed: int) -> list[tuple[list[str], list[str]]]:
    """``n`` (words, tags) pairs: a template with its E slots filled by names, sometimes a filler word added."""
    r = np.random.default_rng(seed)
    data = []
    for _ in range(n):
        words, tags = [], []
        for slot in TEMPLATES[int(r.integers(len(TEMPLATES)))]:
            if slot == "E":
                names = PLACES if r.random() < 0.6 else ORGS
                name = names[int(r.integers(len(names)))].split()
                words += name
                tags += ["B"] + ["I"] * (len(name) - 1)
            else:
                words.append(slot)
                tags.append("O")
        if len(words) < MAXLEN and r.random() < 0.5:
            at = int(r.integers(len(words) + 1))
            words.insert(at, str(r.choice(["very", "nice", "old", "famous", "far"])))
            tags.insert(at, "O")
        data.append((words[:MAXLEN], tags[:MAXLEN]))
    return data


def prepare_sequence(seqs, word_to_idx, tag_to_idx):
    """The tutorial's ``prepare_sequence``, padding to MAXLEN (one length for the whole dataset), as numpy."""
    seq_outputs, label_outputs, seq_length = [], [], []
    for seq, tag in seqs:
        seq_length.append(len(seq))
        idxs = [word_to_idx[w] for w in seq]
        labels = [tag_to_idx[t] for t in tag]
        idxs.extend([word_to_idx['<pad>'] for i in range(MAXLEN - len(seq))])
        labels.extend([tag_to_idx['O'] for i in range(MAXLEN - len(seq))])
        seq_outputs.append(idxs)
        label_outputs.append(labels)
    return np.array(seq_outputs, np.int64), np.array(label_outputs, np.int64), np.array(seq_length, np.int64)


TRAIN = prepare_sequence(sentences(480, 0), word_to_idx, tag_to_idx)
TEST = prepare_sequence(sentences(160, 1), word_to_idx, tag_to_idx)


class TaggedSentences(corpus.Data):
    """(data, seq_length, label) columns, in the order the train cell takes them."""

    def train_dataset(self) -> ds.Dataset:
        data, label, seq_length = TRAIN
        return ds.NumpySlicesDataset({"data": data, "seq_length": seq_length, "label": label},
                                     shuffle=True).batch(BATCH, drop_remainder=True)

    def eval_dataset(self) -> ds.Dataset | None:
        return None  # the CRF decodes with Viterbi: evaluated by tag accuracy below, not by a loss

    def sample_inputs(self) -> tuple[ms.Tensor, ms.Tensor, ms.Tensor]:
        data, label, seq_length = TRAIN
        return ms.Tensor(data[:BATCH]), ms.Tensor(seq_length[:BATCH]), ms.Tensor(label[:BATCH])


DATA = TaggedSentences(TRAIN[0], TRAIN[1], EPOCHS, BATCH)


# --- the tutorial's CRF -------------------------------------------------------------------------


def compute_score(emissions, tags, seq_ends, mask, trans, start_trans, end_trans):
    # emissions: (seq_length, batch_size, num_tags)
    # tags: (seq_length, batch_size)
    # mask: (seq_length, batch_size)
    seq_length, batch_size = tags.shape
    mask = mask.astype(emissions.dtype)
    score = start_trans[tags[0]]
    score += emissions[0, mnp.arange(batch_size), tags[0]]
    for i in range(1, seq_length):
        score += trans[tags[i - 1], tags[i]] * mask[i]
        score += emissions[i, mnp.arange(batch_size), tags[i]] * mask[i]
    last_tags = tags[seq_ends, mnp.arange(batch_size)]
    score += end_trans[last_tags]
    return score


def compute_normalizer(emissions, mask, trans, start_trans, end_trans):
    seq_length = emissions.shape[0]
    score = start_trans + emissions[0]
    for i in range(1, seq_length):
        broadcast_score = score.expand_dims(2)
        broadcast_emissions = emissions[i].expand_dims(1)
        next_score = broadcast_score + trans + broadcast_emissions
        next_score_max = next_score.max()
        next_score = mnp.log(mnp.sum(mnp.exp(next_score - next_score_max), axis=1)) + next_score_max
        score = mnp.where(mask[i].expand_dims(1), next_score, score)
    score += end_trans
    return mnp.log(mnp.sum(mnp.exp(score), axis=1))


def viterbi_decode(emissions, mask, trans, start_trans, end_trans):
    seq_length = mask.shape[0]
    score = start_trans + emissions[0]
    history = ()
    for i in range(1, seq_length):
        broadcast_score = score.expand_dims(2)
        broadcast_emission = emissions[i].expand_dims(1)
        next_score = broadcast_score + trans + broadcast_emission
        indices = next_score.argmax(axis=1)
        history += (indices,)
        next_score = next_score.max(axis=1)
        score = mnp.where(mask[i].expand_dims(1), next_score, score)
    score += end_trans
    return score, history


def post_decode(score, history, seq_length):
    """The tutorial's ``post_decode`` on host arrays (it reads one element at a time with ``asnumpy``)."""
    batch_size = seq_length.shape[0]
    seq_ends = seq_length - 1
    best_tags_list = []
    for idx in range(batch_size):
        best_last_tag = score[idx].argmax(axis=0)
        best_tags = [int(best_last_tag)]
        for hist in reversed(history[:seq_ends[idx]]):
            best_last_tag = hist[idx][best_tags[-1]]
            best_tags.append(int(best_last_tag))
        best_tags.reverse()
        best_tags_list.append(best_tags)
    return best_tags_list


def sequence_mask(seq_length, max_length, batch_first=False):
    """根据序列实际长度和最大长度生成mask矩阵 (the mask from the real lengths)"""
    range_vector = mnp.arange(0, max_length, 1, seq_length.dtype)
    result = range_vector < seq_length.view(seq_length.shape + (1,))
    if batch_first:
        return result.astype(ms.int64)
    return result.astype(ms.int64).swapaxes(0, 1)


class CRF(nn.Cell):
    def __init__(self, num_tags: int, batch_first: bool = False, reduction: str = 'sum') -> None:
        if num_tags <= 0:
            raise ValueError(f'invalid number of tags: {num_tags}')
        super().__init__()
        if reduction not in ('none', 'sum', 'mean', 'token_mean'):
            raise ValueError(f'invalid reduction: {reduction}')
        self.num_tags = num_tags
        self.batch_first = batch_first
        self.reduction = reduction
        self.start_transitions = ms.Parameter(initializer(Uniform(0.1), (num_tags,)), name='start_transitions')
        self.end_transitions = ms.Parameter(initializer(Uniform(0.1), (num_tags,)), name='end_transitions')
        self.transitions = ms.Parameter(initializer(Uniform(0.1), (num_tags, num_tags)), name='transitions')

    def construct(self, emissions, tags=None, seq_length=None):
        if tags is None:
            return self._decode(emissions, seq_length)
        return self._forward(emissions, tags, seq_length)

    def _forward(self, emissions, tags=None, seq_length=None):
        if self.batch_first:
            batch_size, max_length = tags.shape
            emissions = emissions.swapaxes(0, 1)
            tags = tags.swapaxes(0, 1)
        else:
            max_length, batch_size = tags.shape
        if seq_length is None:
            seq_length = mnp.full((batch_size,), max_length, ms.int64)
        mask = sequence_mask(seq_length, max_length)
        numerator = compute_score(emissions, tags, seq_length - 1, mask, self.transitions, self.start_transitions,
                                  self.end_transitions)
        denominator = compute_normalizer(emissions, mask, self.transitions, self.start_transitions,
                                         self.end_transitions)
        llh = denominator - numerator
        if self.reduction == 'none':
            return llh
        if self.reduction == 'sum':
            return llh.sum()
        if self.reduction == 'mean':
            return llh.mean()
        return llh.sum() / mask.astype(emissions.dtype).sum()

    def _decode(self, emissions, seq_length=None):
        if self.batch_first:
            batch_size, max_length = emissions.shape[:2]
            emissions = emissions.swapaxes(0, 1)
        else:
            batch_size, max_length = emissions.shape[:2]
        if seq_length is None:
            seq_length = mnp.full((batch_size,), max_length, ms.int64)
        mask = sequence_mask(seq_length, max_length)
        return viterbi_decode(emissions, mask, self.transitions, self.start_transitions, self.end_transitions)


class BiLSTM_CRF(nn.Cell):  # pylint: disable=invalid-name (the tutorial's name)
    def __init__(self, vocab_size, embedding_dim, hidden_dim, num_tags, padding_idx=0):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=padding_idx)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim // 2, bidirectional=True, batch_first=True)
        self.hidden2tag = nn.Dense(hidden_dim, num_tags, 'he_uniform')
        self.crf = CRF(num_tags, batch_first=True, reduction='token_mean')

    def construct(self, inputs, seq_length, tags=None):
        embeds = self.embedding(inputs)
        outputs, _ = self.lstm(embeds, seq_length=seq_length)
        feats = self.hidden2tag(outputs)
        crf_outs = self.crf(feats, tags, seq_length)
        return crf_outs


def recipe() -> corpus.Recipe:
    model = BiLSTM_CRF(len(word_to_idx), EMBEDDING_DIM, HIDDEN_DIM, len(tag_to_idx))
    optimizer = nn.SGD(model.trainable_params(), learning_rate=LR, weight_decay=1e-4)
    train_one_step = nn.TrainOneStepCell(model, optimizer)
    return corpus.Recipe(model, None, optimizer, ms.Model(train_one_step))


def tag_accuracy(model) -> float:
    """Viterbi-decoded tags against the truth, over the valid tokens of the held-out sentences."""
    data, label, seq_length = TEST
    score, history = model(ms.Tensor(data), ms.Tensor(seq_length))
    predict = post_decode(score.asnumpy(), [h.asnumpy() for h in history], seq_length)
    correct = sum(int(p == t) for row, truth, n in zip(predict, label, seq_length) for p, t in zip(row, truth[:n]))
    return correct / int(seq_length.sum())


def train(callbacks):
    """The tutorial's loop over batches; a Doctor among ``callbacks`` watches the train cell (``doctor.watch``)."""
    import contextlib

    from mindspore_doctor import Doctor

    setup = recipe()
    model, train_one_step = setup.network, setup.model._train_network  # pylint: disable=protected-access
    doctor = next((c for c in callbacks if isinstance(c, Doctor)), None)
    hooks = [c for c in callbacks if c is not doctor]
    train_dataset = DATA.train_dataset()
    losses = []
    with (doctor.watch(train_one_step, train_dataset=train_dataset, epochs=EPOCHS) if doctor
          else contextlib.nullcontext()) as run:
        for _ in range(EPOCHS):
            for data, seq_length, label in train_dataset.create_tuple_iterator():
                for hook in hooks:
                    hook.on_train_step_begin(None)
                loss = train_one_step(data, seq_length, label)
                if run is not None:
                    run.step(loss, data, seq_length, label)
                for hook in hooks:
                    hook.on_train_step_end(None)
                losses.append(float(loss.asnumpy()))
            if run is not None:
                run.epoch_end()
    return kit.Outcome(losses=losses, network=model, metrics={"tag_accuracy": tag_accuracy(model)})


def effect(outcome):
    assert outcome.mean_loss(last=10) < 0.2 * outcome.mean_loss(first=10), outcome.losses[::10]
    assert outcome.metrics["tag_accuracy"] > 0.95, outcome.metrics
