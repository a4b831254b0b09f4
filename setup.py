from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

RULE_DOCS = "docs/rules"
"""One page per finding code, kept at the repository's root and shipped inside the package at the same relative
path, where mindspore_doctor/rule_docs.py looks first (package_data cannot reach outside the package)."""


class BuildPyWithRuleDocs(build_py):
    """Also copy the rule pages into the built package: ``msdoctor rule`` and the reports' links need them."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the checkout's pages
            return
        target = Path(self.build_lib, "mindspore_doctor", RULE_DOCS)
        self.mkpath(str(target))
        for page in sorted(Path(RULE_DOCS).glob("*.md")):
            self.copy_file(str(page), str(target / page.name))


setup(
    name="mindspore_doctor",
    version="0.1.0",
    description="A MindSpore-native debugger: tells you what is wrong with a training run and what to change.",
    python_requires=">=3.11,<3.12",
    packages=find_packages(include=["mindspore_doctor", "mindspore_doctor.*"]),
    # config.pyi: DoctorConfig's fields, which it builds at import time from the rules, for type checkers
    package_data={"mindspore_doctor": ["export/templates/*", "py.typed", "config.pyi"]},
    install_requires=[
        "mindspore==2.10.*",
        "numpy<2",
        "crc32c>=2.4",  # native CRC32C for the event files (MindInsight framing, tensorboardX)
        # the reports are part of every run with a summary_dir: the HTML page and the TensorBoard event files
        "jinja2>=3.1",
        "matplotlib>=3.8",
        "tensorboardX==2.6.5",
        "optuna>=4.9,<6",  # msdoctor tune: study, TPE and random samplers, pruners, RDB storage, importance
        # label errors (MSD311, msdoctor labels): confident learning on out-of-sample probabilities
        "cleanlab==2.9.*",
        "scikit-learn>=1.5",
    ],
    extras_require={
        # the TensorBoard server (scripts/tensorboard.sh); the writer, tensorboardX, is a default dependency
        "tensorboard": ["tensorboard==2.21.0"],
        "test": ["pytest>=8", "pytest-timeout>=2.3", "selenium>=4.20", "tensorboard==2.21.0",
                 # the real-code corpus (benchmarks/realworld): maintained MindSpore model libraries, pinned, and
                 # the imports they need but do not declare (mindyolo: cv2; mindaudio: wget, mir_eval, Levenshtein)
                 "mindcv==0.3.0", "mindyolo==0.5.0", "mindaudio==0.3.0", "opencv-python-headless==4.10.0.84",
                 "wget==3.2", "mir_eval==0.8.2", "Levenshtein==0.27.5"],
    },
    entry_points={"console_scripts": ["msdoctor=mindspore_doctor.cli:main"]},
    cmdclass={"build_py": BuildPyWithRuleDocs},
)
