"""Data-parallel training launched by msrun in tests/test_distributed.py (2 ranks, CPU or any backend).

    msrun --worker_num=2 --local_worker_num=2 --master_port=P --join=True train_dp.py SCENARIO OUT_DIR

healthy  common seed, sharded data, DATA_PARALLEL: trains once without and once with
         Doctor() and saves both final weights (do-no-harm) -> OUT/plain|doctor/...
bugs     run 1: a different seed per rank and an unsharded dataset (MSD501, MSD503);
         run 2: a hand-written train step without gradient all-reduce (MSD502)
kill     rank 1 SIGKILLs itself at step KILL_STEP, just before the Doctor's collective;
         rank 0 records how long its Doctor waited (OUT/kill_rank0.json)
"""
import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

scenario, out = sys.argv[1], Path(sys.argv[2])
(out / "pids").mkdir(parents=True, exist_ok=True)
(out / "pids" / f"{os.environ.get('MS_ROLE', 'worker')}_{os.getpid()}").touch()  # the test kills leftovers

import mindspore as ms  # noqa: E402
from mindspore import nn, ops  # noqa: E402
from mindspore.communication import get_group_size, get_rank, init  # noqa: E402
from mindspore.context import ParallelMode  # noqa: E402

from mindspore_doctor import Doctor  # noqa: E402

KILL_STEP = 4
KILL_TIMEOUT_S = 3  # the Doctor's collective timeout at the kill step (tests/test_distributed.py)
ms.set_context(mode=ms.GRAPH_MODE)
init()
RANK, WORLD = get_rank(), get_group_size()
ms.set_auto_parallel_context(parallel_mode=ParallelMode.DATA_PARALLEL, gradients_mean=True)


def dataset(sharded: bool = True) -> ms.dataset.Dataset:
    rng = np.random.RandomState(0)
    x = rng.randn(512, 8).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int32)
    shards = {"num_shards": WORLD, "shard_id": RANK} if sharded else {}
    return ms.dataset.NumpySlicesDataset({"x": x, "y": y}, shuffle=False, **shards).batch(32)


def network(seed: int) -> nn.Cell:
    ms.set_seed(seed)
    return nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 2))


def loss_fn() -> nn.Cell:
    return nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")


def save_weights(net: nn.Cell, name: str) -> None:
    np.savez(out / f"{name}_rank{RANK}.npz", **{p.name: p.asnumpy() for p in net.trainable_params()})


class NoAllReduceStep(nn.TrainOneStepCell):
    """The bug: gradients go straight to the optimizer, never through the DistributedGradReducer."""

    def construct(self, *inputs):
        loss = self.network(*inputs)
        grads = self.grad_no_sens(self.network, self.weights)(*inputs)
        return ops.depend(loss, self.optimizer(grads))


class Clock(ms.train.Callback):
    """Timestamps around the Doctor at the kill step; rank 1 dies in the 'before' clock."""

    stamps: dict = {}

    def __init__(self, where: str, doctor: Doctor | None = None) -> None:
        self.where, self.doctor = where, doctor

    def on_train_step_end(self, run_context):
        if run_context.original_args().cur_step_num != KILL_STEP:
            return
        reached = out / "rank0_at_kill_step"
        if self.where == "before" and RANK == 0:
            # The watchdog under test, short from here on only: with 3 s from the start, two ranks compiling
            # on 2 loaded cores drifted apart by more than that at an early check, and the check abandoned on
            # one rank was later matched by the other's, in the middle of a training all-reduce.
            self.doctor.session.ranks.channel.timeout_s = KILL_TIMEOUT_S
            run_context.original_args().net_outputs.asnumpy()  # the step, its all-reduce included, is done
            reached.touch()  # rank 0 finished the step's gradient all-reduce and is about to enter the Doctor
        if self.where == "before" and RANK == 1:
            deadline = time.time() + 120
            while not reached.exists() and time.time() < deadline:  # die only once rank 0 is past the training
                time.sleep(0.05)  # collectives: otherwise rank 0 could hang in MindSpore's own all-reduce
            os.kill(os.getpid(), signal.SIGKILL)
        Clock.stamps[self.where] = time.time()
        if self.where == "after":
            msd002 = [f.to_dict() for f in self.doctor.report.by_code("MSD002")]
            (out / f"kill_rank{RANK}.json").write_text(json.dumps(
                {"doctor_seconds": Clock.stamps["after"] - Clock.stamps["before"], "msd002": msd002}))


def train(net: nn.Cell, callbacks: list, sharded: bool = True, train_cell: nn.Cell | None = None) -> None:
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9)
    if train_cell is not None:
        model = ms.Model(train_cell(nn.WithLossCell(net, loss_fn()), optimizer))
    else:
        model = ms.Model(net, loss_fn(), optimizer)
    model.train(1, dataset(sharded), callbacks=callbacks, dataset_sink_mode=False)


if scenario == "healthy":
    net = network(1)
    train(net, [])
    save_weights(net, "plain")
    net = network(1)
    train(net, [Doctor(summary_dir=out / "doctor", rank_check_every=2)])
    save_weights(net, "doctor")
elif scenario == "bugs":
    train(network(100 + RANK), [Doctor(summary_dir=out / "bad_init", rank_check_every=2)], sharded=False)
    train(network(1), [Doctor(summary_dir=out / "no_allreduce", rank_check_every=2)], train_cell=NoAllReduceStep)
elif scenario == "kill":
    doctor = Doctor(summary_dir=out / "doctor", rank_check_every=2)
    train(network(1), [Clock("before", doctor), doctor, Clock("after", doctor)])
