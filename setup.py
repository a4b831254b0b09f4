from setuptools import find_packages, setup

setup(
    name="mindspore_doctor",
    version="0.1.0",
    description="A MindSpore-native debugger: tells you what is wrong with a training run and what to change.",
    python_requires=">=3.11,<3.12",
    packages=find_packages(include=["mindspore_doctor", "mindspore_doctor.*"]),
    package_data={"mindspore_doctor": ["export/templates/*", "py.typed"]},
    install_requires=[
        "mindspore==2.10.*",
        "numpy<2",
        "google-crc32c>=1.5",
    ],
    extras_require={
        "html": ["jinja2>=3.1", "matplotlib>=3.8"],
        "test": ["pytest>=8", "pytest-timeout>=2.3", "jinja2>=3.1", "matplotlib>=3.8", "selenium>=4.20"],
    },
    entry_points={"console_scripts": ["msdoctor=mindspore_doctor.cli:main"]},
)
