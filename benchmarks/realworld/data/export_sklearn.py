"""One-off export of scikit-learn's bundled real datasets to .npz files (run once; the corpus never imports sklearn).

    python benchmarks/realworld/data/export_sklearn.py   # needs scikit-learn (any 1.x); writes <name>.npz here

Each file holds the raw arrays exactly as scikit-learn ships them: ``x`` (float64 features), ``y`` (targets),
``feature_names`` and a ``source`` note. Splitting, scaling and batching are the corpus programs' job.
"""
from pathlib import Path

import numpy as np
from sklearn import datasets

HERE = Path(__file__).resolve().parent
LOADERS = {
    "digits": datasets.load_digits,  # 1797 x 64 (8x8 grey images, 0..16), 10 classes
    "wine": datasets.load_wine,  # 178 x 13 tabular, 3 classes
    "breast_cancer": datasets.load_breast_cancer,  # 569 x 30 tabular, 2 classes
    "diabetes": datasets.load_diabetes,  # 442 x 10 tabular (already centred/scaled), regression target
}

if __name__ == "__main__":
    import sklearn

    for name, load in LOADERS.items():
        bunch = load()
        np.savez_compressed(HERE / f"{name}.npz", x=np.asarray(bunch.data, dtype=np.float64), y=np.asarray(bunch.target),
                            feature_names=np.asarray(bunch.feature_names, dtype=str),
                            source=np.asarray(f"sklearn.datasets.load_{name} (scikit-learn {sklearn.__version__})"))
        print(name, bunch.data.shape, np.asarray(bunch.target).dtype)
