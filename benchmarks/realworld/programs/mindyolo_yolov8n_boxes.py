"""mindyolo YOLOv8-n (its yolov8n.yaml network, 2 classes) detecting coloured squares in 96x96 images, with its own
YOLOv8Loss (task-aligned assigner, DFL, CIoU) and its hyp.scratch recipe: Nesterov momentum 0.937, parameter groups
(bias lr warming down from 0.1, weight decay on weights only), linear lr decay."""
import numpy as np
import mindspore as ms
from mindspore import nn
from mindyolo.models import create_model
from mindyolo.models.losses import create_loss
from mindyolo.optim import create_group_param, create_optimizer
from mindyolo.utils.config import Config

from benchmarks.faults import kit
from benchmarks.realworld import corpus

FAULT = kit.Fault("healthy: mindyolo YOLOv8-n with its own loss and parameter-group recipe", expect=(), arch="yolov8",
                  data="boxes (synthetic detection)", category="healthy")
LIBRARY = "mindyolo 0.5.0"
COVERS = ("detection head (DFL + classes, 3 strides)", "C2f (split + concat)", "SPPF", "upsample + concat FPN",
          "BatchNorm everywhere", "SiLU", "per-group lr with bias warm-up", "custom loss with 3 inputs")

SIZE, MAX_BOXES, CLASSES, EPOCHS, BATCH = 96, 4, 2, 8, 8
NETWORK = {  # configs/yolov8/yolov8n.yaml (backbone and head as shipped, nc = 2)
    "model_name": "yolov8", "nc": CLASSES, "reg_max": 16, "depth_multiple": 0.33, "width_multiple": 0.25,
    "stride": [8, 16, 32],
    "backbone": [[-1, 1, "ConvNormAct", [64, 3, 2]], [-1, 1, "ConvNormAct", [128, 3, 2]], [-1, 3, "C2f", [128, True]],
                 [-1, 1, "ConvNormAct", [256, 3, 2]], [-1, 6, "C2f", [256, True]], [-1, 1, "ConvNormAct", [512, 3, 2]],
                 [-1, 6, "C2f", [512, True]], [-1, 1, "ConvNormAct", [1024, 3, 2]], [-1, 3, "C2f", [1024, True]],
                 [-1, 1, "SPPF", [1024, 5]]],
    "head": [[-1, 1, "Upsample", [None, 2, "nearest"]], [[-1, 6], 1, "Concat", [1]], [-1, 3, "C2f", [512]],
             [-1, 1, "Upsample", [None, 2, "nearest"]], [[-1, 4], 1, "Concat", [1]], [-1, 3, "C2f", [256]],
             [-1, 1, "ConvNormAct", [256, 3, 2]], [[-1, 12], 1, "Concat", [1]], [-1, 3, "C2f", [512]],
             [-1, 1, "ConvNormAct", [512, 3, 2]], [[-1, 9], 1, "Concat", [1]], [-1, 3, "C2f", [1024]],
             [[15, 18, 21], 1, "YOLOv8Head", ["nc", "reg_max", "stride"]]],
}
HYP = {"lr_init": 0.01, "momentum": 0.937, "nesterov": True, "warmup_bias_lr": 0.1, "gp_weight_decay": 0.0005,
       "start_factor": 1.0, "end_factor": 0.01, "warmup_epochs": 1, "min_warmup_step": 80}


def boxes(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Grey noisy images with 1-2 squares (class 0 red, class 1 green); labels (n, MAX_BOXES, 6) rows
    [image, class, cx, cy, w, h] normalised, padded with -1 (mindyolo's label_pad)."""
    r = np.random.default_rng(seed)
    images = 0.5 + 0.05 * r.standard_normal((n, 3, SIZE, SIZE))
    labels = -np.ones((n, MAX_BOXES, 6), np.float32)
    for i in range(n):
        for j in range(r.integers(1, 3)):
            cls, side = r.integers(0, CLASSES), r.integers(20, 80)
            x0, y0 = r.integers(0, SIZE - side, 2)
            images[i, :, y0:y0 + side, x0:x0 + side] = 0.1
            images[i, cls, y0:y0 + side, x0:x0 + side] = 0.9
            labels[i, j] = [0, cls, (x0 + side / 2) / SIZE, (y0 + side / 2) / SIZE, side / SIZE, side / SIZE]
    return images.astype(np.float32), labels


X, Y = boxes(320, 0)
DATA = corpus.Data(X, Y, EPOCHS, BATCH)


class YoloWithLoss(nn.Cell):
    """mindyolo's forward_func as a cell: the loss takes the predictions, the labels and the images."""

    def __init__(self, network: nn.Cell, loss_fn: nn.Cell):
        super().__init__()
        self.network, self.loss_fn = network, loss_fn

    def construct(self, x, label):
        loss, _ = self.loss_fn(self.network(x), label, x)
        return loss


def recipe() -> corpus.Recipe:
    net = create_model("yolov8", model_cfg=Config(NETWORK), num_classes=CLASSES)
    loss = create_loss(name="YOLOv8Loss", box=7.5, cls=0.5, dfl=1.5, reg_max=16, stride=NETWORK["stride"], nc=CLASSES)
    groups = create_group_param(net.trainable_params(), group_param="yolov8", accumulate=1, epochs=EPOCHS,
                                steps_per_epoch=DATA.steps_per_epoch, total_batch_size=BATCH, **HYP)
    opt = create_optimizer(groups, optimizer="momentum", lr=HYP["lr_init"], momentum=HYP["momentum"],
                           nesterov=HYP["nesterov"])
    step = nn.TrainOneStepCell(YoloWithLoss(net, loss), opt)
    return corpus.Recipe(net, loss, opt, ms.train.Model(step))


def train(callbacks):
    return corpus.fit(recipe(), DATA, callbacks)


def effect(outcome):
    assert outcome.mean_loss(last=20) < 0.6 * outcome.mean_loss(first=10), outcome.losses[::20]
