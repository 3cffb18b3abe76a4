"""Root filesystems for AgentBench's OS tasks: the images its Dockerfiles describe, built offline
from the Debian mirror by ``mmdebstrap`` (no container registry), once, and cached by content.

AgentBench's images (``data/os_interaction/res/dockerfiles``) are Ubuntu with a few packages:
``default`` (python3, pip, git, vim, curl, wget, unzip, zip, tree), ``packages`` (the same and
npm) and ``ubuntu`` (bare, with ``/file.txt``). Here each is a Debian bookworm ``minbase`` root
with the same packages (and ``procps``), root's ``.bashrc`` from ``/etc/skel`` as in Ubuntu's
image (its prompt sets the xterm title, which AgentBench's shell reader looks for), and an
offline apt repository (``/var/lib/aios-offline-apt``, the only apt source) holding the packages
init scripts install (``sudo`` and a few tools), so ``apt install sudo`` works without a network.

An image is addressed by its recipe (:func:`recipe_digest`): ``<dir>/<name>-<digest>/root`` with a
``manifest.json`` beside it. Its files belong to the sandbox's uid range (host uid
:data:`UID_BASE` + the uid in the image), so root inside a sandbox's user namespace owns them
and nothing in the image is owned by a host uid that means anything on the host.

Building needs root, ``mmdebstrap`` and the Debian mirror (``deploy/setup.sh`` builds
``default``); running a task never downloads: a missing image is a clear error naming the
command that builds it (``aios-rl agentbench images build NAME``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from aios_rl.errors import AiosError

__all__ = [
    "IMAGES",
    "UID_BASE",
    "UID_COUNT",
    "ImageMissing",
    "ImageRecipe",
    "build_image",
    "image_dir",
    "image_root",
    "images_home",
    "recipe_digest",
    "resolve_image",
]

UID_BASE = 1_000_000
"""Host uid (and gid) of root inside an OS sandbox; the image's uid ``n`` is host ``UID_BASE+n``."""
UID_COUNT = 65_536
SUITE = "bookworm"
RECIPE_VERSION = 1
"""Raised when what a build does changes, so cached images are rebuilt."""

OFFLINE_DIR = "/var/lib/aios-offline-apt"
_BASE = ("python3", "python3-pip", "git", "vim", "curl", "wget", "unzip", "zip", "tree", "procps")
_OFFLINE = ("sudo", "bc", "jq", "less", "psmisc", "net-tools", "file", "lsof", "cron", "acl")


class ImageMissing(AiosError):
    """The image a task names is not built (or not known)."""


@dataclass(frozen=True)
class ImageRecipe:
    name: str
    packages: tuple[str, ...]
    offline: tuple[str, ...] = _OFFLINE
    files: tuple[tuple[str, str], ...] = ()
    """Files written into the image: (absolute path, text)."""
    suite: str = SUITE
    version: int = RECIPE_VERSION


IMAGES: dict[str, ImageRecipe] = {
    "default": ImageRecipe("default", _BASE),
    "packages": ImageRecipe("packages", (*_BASE, "npm")),
    "ubuntu": ImageRecipe("ubuntu", ("procps",), files=(("/file.txt", "tmp\n"),)),
}


def images_home() -> Path:
    """Where images live: ``AIOS_RL_IMAGES`` or ``/var/lib/aios-rl/agentbench-images`` (a path
    every component of which the sandbox's uids can traverse: not under ``/root``)."""
    return Path(os.environ.get("AIOS_RL_IMAGES") or "/var/lib/aios-rl/agentbench-images")


def recipe_digest(recipe: ImageRecipe) -> str:
    raw = json.dumps(asdict(recipe), sort_keys=True).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


def resolve_image(name: str) -> ImageRecipe:
    """The recipe for a task's ``image`` (AgentBench writes ``local-os/default`` and the like)."""
    short = name.rsplit("/", 1)[-1]
    if short not in IMAGES:
        raise ImageMissing(f"unknown image {name!r} (known: {', '.join(sorted(IMAGES))})")
    return IMAGES[short]


def image_dir(recipe: ImageRecipe, home: Path | None = None) -> Path:
    return (home or images_home()) / f"{recipe.name}-{recipe_digest(recipe)}"


def image_root(name: str, home: Path | None = None) -> Path:
    """The built root filesystem of image ``name``; :class:`ImageMissing` when not built."""
    recipe = resolve_image(name)
    where = image_dir(recipe, home)
    if not (where / "manifest.json").is_file():
        raise ImageMissing(
            f"image {recipe.name!r} is not built (run: aios-rl agentbench images build "
            f"{recipe.name}; it needs root, mmdebstrap and the Debian mirror)"
        )
    return where / "root"


def _packages_index(repo: Path) -> str:
    """A ``Packages`` file for the ``.deb`` files in ``repo`` (what dpkg-scanpackages writes)."""
    entries = []
    for deb in sorted(repo.glob("*.deb")):
        control = subprocess.run(
            ["dpkg-deb", "-f", str(deb)], check=True, capture_output=True, text=True
        ).stdout.rstrip("\n")
        data = deb.read_bytes()
        entries.append(
            f"{control}\nFilename: ./{deb.name}\nSize: {len(data)}\n"
            f"MD5sum: {hashlib.md5(data).hexdigest()}\n"
            f"SHA256: {hashlib.sha256(data).hexdigest()}\n"
        )
    return "\n".join(entries)


def _shift_owners(root: Path, base: int) -> None:
    """Every file of ``root`` to the sandbox's uid range (``chown`` clears set-id bits: the
    mode is put back)."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames, None]:
            path = dirpath if name is None else os.path.join(dirpath, name)
            st = os.lstat(path)
            if st.st_uid >= base:
                continue
            os.lchown(path, base + st.st_uid, base + st.st_gid)
            if not stat.S_ISLNK(st.st_mode):
                os.chmod(path, stat.S_IMODE(st.st_mode))


def build_image(
    name: str,
    home: Path | None = None,
    *,
    mirror: str | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    """Build image ``name`` unless it is cached; return its root. Needs root and mmdebstrap."""
    recipe = resolve_image(name)
    where = image_dir(recipe, home)
    if (where / "manifest.json").is_file():
        return where / "root"
    if os.geteuid() != 0:
        raise PermissionError("building an image needs root (its files get the sandbox's uids)")
    if shutil.which("mmdebstrap") is None:
        raise FileNotFoundError("mmdebstrap is not installed (apt-get install mmdebstrap)")
    where.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(where.parent, 0o755)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=where.parent, prefix=f".build-{recipe.name}-") as tmp:
        root = Path(tmp) / "root"
        offline = OFFLINE_DIR
        hooks = [
            f'mkdir -p "$1{offline}/partial"',
            f'chroot "$1" apt-get install --download-only -y -qq '
            f"-o Dir::Cache::Archives={offline}/ {' '.join(recipe.offline)}",
            'cp "$1/etc/skel/.bashrc" "$1/root/.bashrc"',
        ]
        argv = [
            "mmdebstrap",
            "--variant=minbase",
            "--quiet",
            f"--include={','.join(recipe.packages)}",
            *(f"--customize-hook={hook}" for hook in hooks),
            recipe.suite,
            str(root),
        ]
        if mirror:
            argv.append(mirror)
        log(f"building image {recipe.name} ({len(recipe.packages)} packages) with mmdebstrap")
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"mmdebstrap failed: {done.stderr.strip()[-2000:]}")
        repo = root / offline.lstrip("/")
        shutil.rmtree(repo / "partial", ignore_errors=True)
        (repo / "Packages").write_text(_packages_index(repo))
        (root / "etc/apt/sources.list").write_text(f"deb [trusted=yes] file:{offline} ./\n")
        for extra in (root / "etc/apt/sources.list.d").glob("*"):
            extra.unlink()
        subprocess.run(
            ["chroot", str(root), "apt-get", "update", "-qq"], check=True, capture_output=True
        )
        for path, text in recipe.files:
            (root / path.lstrip("/")).write_text(text)
        _shift_owners(root, UID_BASE)
        os.chown(tmp, 0, 0)
        os.chmod(tmp, 0o755)
        size = sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(root) for f in fs)
        manifest = {
            **asdict(recipe),
            "digest": recipe_digest(recipe),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "bytes": size,
            "offline_debs": sorted(p.name for p in repo.glob("*.deb")),
        }
        (Path(tmp) / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        os.rename(tmp, where)
        os.makedirs(tmp)  # TemporaryDirectory removes what it made
    log(f"image {recipe.name} built in {time.monotonic() - started:.0f} s: {where}")
    return where / "root"
