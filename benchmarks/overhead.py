"""Paired step timing: a plain and a Doctor-attached copy of one model stepped in alternating blocks in ONE process,
so both see the same machine conditions (``scripts/bench_overhead.py`` and the real-code corpus's runner use it)."""
from __future__ import annotations

import statistics
import tempfile
import time
from typing import Any, Callable

WARMUP = 12
"""Steps left out of every timing at the start: graph compilation, first kernel builds."""
EXPORTS = {"reports": {"mindinsight": False}, "mindinsight": {"mindinsight": True},
           "tensorboard": {"mindinsight": False, "tensorboard": True}}
"""``--exports``: the Doctor options of each paired variant with a ``summary_dir``. "reports": the JSON reports
alone (written at each epoch end), over the default Doctor's; each dashboard export over "reports"."""


def _wait(outputs: Any) -> None:
    """Read a step's outputs on the host, so the block's steps are done: its loss, or the first of the tensors a
    train cell returns (a loss and logits, a loss and the loss scale)."""
    while isinstance(outputs, (tuple, list)):
        outputs = outputs[0]
    outputs.asnumpy()


def _alternate(runners: dict[str, Callable[[list], None]], batches: list[tuple], block: int) -> dict[str, Any]:
    """Run every variant over ``batches`` in blocks, their order rotating from block to block; the median step of
    each (blocks after the compiling ones), and the Doctor's median and mean step over each other variant's."""
    names = list(runners)
    per_step: dict[str, list[float]] = {name: [] for name in names}
    blocks: dict[str, dict[int, float]] = {name: {} for name in names}  # timed block number -> seconds
    for number, start in enumerate(range(0, len(batches), block)):
        part = batches[start:start + block]
        shift = number % len(names)
        for variant in names[shift:] + names[:shift]:
            began = time.perf_counter()
            runners[variant](part)
            if number >= WARMUP // block + 1:  # the first blocks compile
                blocks[variant][number] = time.perf_counter() - began
                per_step[variant].append(blocks[variant][number] / len(part))
    median = {v: statistics.median(t) for v, t in per_step.items()}
    mean = {v: statistics.fmean(t) for v, t in per_step.items()}
    result: dict[str, Any] = {"steps": len(batches), "block": block,
                              **{f"{name}_median_ms": median[name] * 1e3 for name in names},
                              **{f"{name}_mean_ms": mean[name] * 1e3 for name in names}}
    for reference in (n for n in names if n != "doctor" and not n.startswith("doctor+")):  # the Doctor's over it
        suffix = "" if reference == "plain" else f"_{reference}"
        result[f"median_ratio{suffix}"] = median["doctor"] / median[reference]
        result[f"mean_ratio{suffix}"] = mean["doctor"] / mean[reference]
    for export in (n for n in names if n.startswith("doctor+")):
        result[f"{export}_mean_ratio"] = mean[export] / mean["plain"]
    result["_blocks"] = blocks  # for :func:`step_split`; the callers take it out
    return result


def step_split(timing: dict[str, Any], host_s: list[float], probed: set[int], reference: str = "plain",
               variant: str = "doctor") -> dict[str, Any]:
    """The Doctor's extra cost per step in us, on probe and on non-probe steps, split into host and graph.

    ``host_s[k - 1]``: seconds spent in the Doctor's hooks on its step ``k`` (``on_train_step_begin``/``_end``, or
    ``run.step``); ``probed``: the step numbers whose statistics were read. Host is timed step by step. Graph is
    the rest of the extra time, which only a block's time holds (its steps run asynchronously up to the block's
    final loss read): ``doctor block - reference block - host in the block`` for the same block number. On
    blocks without a probe step it is the non-probe steps' graph cost (mean and median over blocks, per step);
    what blocks with probe steps cost beyond that, over their probe steps, is the probe steps' graph cost.
    """
    blocks, block = timing["_blocks"], timing["block"]
    free, probing = [], []  # (steps, graph seconds, probe steps) per timed block
    for number, doctor_s in blocks[variant].items():
        steps = range(number * block + 1, min((number + 1) * block, len(host_s)) + 1)
        graph = doctor_s - blocks[reference][number] - sum(host_s[k - 1] for k in steps)
        hits = sum(k in probed for k in steps)
        (probing if hits else free).append((len(steps), graph, hits))
    timed = [k for number in blocks[variant]
             for k in range(number * block + 1, min((number + 1) * block, len(host_s)) + 1)]
    host_free = [host_s[k - 1] for k in timed if k not in probed]
    host_probe = [host_s[k - 1] for k in timed if k in probed]
    graph_free = sum(g for _, g, _ in free) / max(1, sum(n for n, _, _ in free))
    probe_steps = sum(h for _, _, h in probing)
    graph_probe = ((sum(g for _, g, _ in probing) - graph_free * sum(n - h for n, _, h in probing)) / probe_steps
                   if probe_steps else float("nan"))
    return {"timed_probe_steps": probe_steps, "timed_nonprobe_steps": len(host_free),
            "nonprobe_host_us": statistics.fmean(host_free) * 1e6 if host_free else float("nan"),
            "nonprobe_graph_us": graph_free * 1e6,
            "nonprobe_graph_median_us": statistics.median(g / n for n, g, _ in free) * 1e6 if free else float("nan"),
            "probe_host_us": statistics.fmean(host_probe) * 1e6 if host_probe else float("nan"),
            "probe_graph_us": graph_probe * 1e6}


def paired_custom_timing(build: Callable[[], tuple], batches: list[tuple], dataset: Any, block: int,
                         loss_read: str = "auto") -> dict:
    """:func:`paired_timing` for the quick-start loop: copies of ``build()``'s (net, loss, optimizer, jit step),
    the Doctor's watched through ``doctor.watch`` with ``run.step(loss, *batch)`` after each step. A third copy
    reads its loss every step ("reading"): on CPU, MindSpore 2.10 runs a loop that never waits for its steps
    several times slower than one that does (measured: the queued steps pile up), so the Doctor, which reads
    the loss each step there, is compared with both."""
    from mindspore_doctor import Doctor

    plain_step = build()[3]
    net, loss_fn, optimizer, doctored_step = build()
    doctor = Doctor(loss_read=loss_read)
    watching = doctor.watch(net, optimizer, loss_fn=loss_fn, train_dataset=dataset, epochs=1)
    run = watching.__enter__()

    reading_step = build()[3]

    def looped(step: Callable[..., Any], after: Callable[..., Any] | None = None) -> tuple[Callable, list[float]]:
        """A block runner over ``step``, and its per-step time in ``after(loss, *batch)``: every variant runs the
        same loop, timers included, so what differs between them is what ``after`` does."""
        after_s: list[float] = []

        def run_block(part: list) -> None:
            for inputs in part:
                out = step(*inputs)
                began = time.perf_counter()
                if after is not None:
                    after(out, *inputs)
                after_s.append(time.perf_counter() - began)
            out.asnumpy()

        return run_block, after_s

    plain_block = looped(plain_step)[0]  # the quick start's loop: the loss read now and then
    reading_block = looped(reading_step, lambda out, *inputs: out.asnumpy())[0]  # a loop that logs its loss
    doctor_block, host_s = looped(doctored_step, run.step)  # host_s: per step, the time inside run.step

    timing = _alternate({"plain": plain_block, "doctor": doctor_block, "reading": reading_block}, batches, block)
    watching.__exit__(None, None, None)
    probed = {s.step for s in doctor.history.probed()}
    split = {"plain": step_split(timing, host_s, probed),
             "reading": step_split(timing, host_s, probed, reference="reading")}
    del timing["_blocks"]
    return {**timing, "probe_steps": len(probed), "split": split}


def paired_timing(build: Callable[[], Any], batches: list[tuple], dataset: Any, block: int,
                  loss_read: str = "auto", exports: tuple[str, ...] = ()) -> dict:
    """Plain and Doctor steps alternated in blocks of ``block`` steps in ONE process.

    ``build()`` returns a fresh ``Model``; both copies step through ``batches`` (one step each), the Doctor's
    copy with ``dataset`` as its training set. Between processes, the same plain run varies by 10-30 % on this
    machine (thread placement, other jobs), more than the Doctor's cost; two identical models stepped in
    alternation see the same conditions. The Doctor gets exactly the callback calls ``Model.train`` makes
    (``on_train_begin``, then ``on_train_step_begin``/``_end`` around each step), so its whole per-step cost is
    timed: probes, the loss read, the rules on probe steps. Each block ends with a read of its last loss (the
    device work is done). ``exports``: names in ``EXPORTS``, each one more Doctor-attached copy that writes that
    export into a temporary ``summary_dir``; its cost per step (``<variant>_step_us``) is the time its hooks took
    beyond those of the variant without it (see ``EXPORTS``), its epoch-end writes included.
    """
    from mindspore.train.callback import RunContext, _InternalCallbackParam

    from mindspore_doctor import Doctor

    steps = len(batches)

    def fresh() -> Any:
        model = build()
        model._train_network.set_train()  # pylint: disable=protected-access (what Model.train does)
        return model

    def attached(options: dict[str, Any] | None) -> tuple[Any, RunContext, Callable[[list], None], list[float]]:
        """A fresh copy, with a Doctor of ``options`` (None: none, the plain variant), and its block runner. Both
        variants run the same loop (``Model.train``'s step bookkeeping and the hooks' timers): what differs between
        them is the Doctor's hooks alone."""
        copy = fresh()
        cb = _InternalCallbackParam()
        cb.train_network, cb.network = copy._train_network, copy._network  # pylint: disable=protected-access
        cb.loss_fn, cb.optimizer = copy._loss_fn, copy._optimizer  # pylint: disable=protected-access
        cb.train_dataset = dataset
        cb.epoch_num, cb.batch_num, cb.cur_epoch_num, cb.cur_step_num = 1, steps, 1, 0
        cb.mode, cb.dataset_sink_mode, cb.parallel_mode, cb.device_number = "train", False, "stand_alone", 1
        context = RunContext(cb)
        doctor = None if options is None else Doctor(loss_read=loss_read, **options)
        if doctor is not None:
            doctor.on_train_begin(context)
        hooks_s = [0.0]  # time inside the Doctor's hooks; then one entry per step: its step hooks' time
        network = copy._train_network  # pylint: disable=protected-access

        def block(part: list) -> None:
            for inputs in part:
                cb.cur_step_num += 1
                cb.train_dataset_element = inputs
                began = time.perf_counter()
                if doctor is not None:
                    doctor.on_train_step_begin(context)
                host = time.perf_counter() - began
                cb.net_outputs = network(*inputs)
                began = time.perf_counter()
                if doctor is not None:
                    doctor.on_train_step_end(context)
                host += time.perf_counter() - began
                hooks_s[0] += host
                hooks_s.append(host)
            _wait(cb.net_outputs)

        return doctor, context, block, hooks_s

    plain_block = attached(None)[2]

    with tempfile.TemporaryDirectory() as tmp:
        doctors = {"doctor": attached({})}
        for name in exports:
            doctors[f"doctor+{name}"] = attached({"summary_dir": f"{tmp}/{name}", "html_report": False,
                                                  **EXPORTS[name]})
        timing = _alternate({"plain": plain_block, **{name: d[2] for name, d in doctors.items()}}, batches, block)
        for doctor, context, _, hooks_s in doctors.values():
            began = time.perf_counter()
            doctor.on_train_epoch_end(context)
            hooks_s[0] += time.perf_counter() - began
            doctor.on_train_end(context)
        for name in doctors:
            if name != "doctor":
                base = "doctor" if name == "doctor+reports" else "doctor+reports"
                timing[f"{name}_step_us"] = (doctors[name][3][0] - doctors[base][3][0]) / steps * 1e6
    probed = {s.step for s in doctors["doctor"][0].history.probed()}
    split = {"plain": step_split(timing, doctors["doctor"][3][1:], probed)}
    del timing["_blocks"]
    return {**timing, "probe_steps": len(probed), "split": split}
