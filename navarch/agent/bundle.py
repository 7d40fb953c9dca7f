"""The agent bundle: one zipapp that runs the agent on a bare system Python.

    python3 -I -S navarch-agent.pyz run --once --config /etc/navarch/agent.yaml

The file holds the agent's own modules and only the pure-Python libraries it imports
(PyYAML without its C extension, nvidia-ml-py, rfc8785, prometheus-client), copied from
this installation: nothing is downloaded, nothing is compiled, so the same bytes run on
x86_64 and aarch64 and on Python 3.9 to 3.13 (the modules keep to 3.9 syntax; .ci/run and
tests/agent/test_bundle.py check that with vermin). The reconciler publishes it to the
fleet's store as ``agent/<version>-<sha256>.pyz`` (navarch.reconcile.publish).

Which navarch modules go in: every module of navarch.agent and its subpackages (except
this builder), and,
transitively, every navarch module they import at module level, plus the few the agent
imports inside functions on its run path (LAZY_MODULES). A module the run needs and the
bundle lacks fails the bundle's own test (it runs the file with ``-I -S``).

The zip is reproducible: entries sorted, fixed timestamps and modes, so one source tree
gives one sha256 (the store key), and two reconcilers of one version publish one object.
Standard library ``zipapp`` layout (PEP 441): ``__main__.py`` at the root.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

import navarch

__all__ = [
    "AgentBundle",
    "build_bundle",
    "bundle_members",
    "VENDORED",
    "LAZY_MODULES",
    "BUNDLE_NAME",
    "BUNDLE_CACHE",
]

BUNDLE_NAME = "navarch-agent.pyz"

#: Top-level import names of the third-party libraries the agent imports, all pure Python.
#: yaml: agent.yaml; pynvml: NVML (nvidia-ml-py); rfc8785: what a report's HMAC signs;
#: prometheus_client: --metrics-textfile.
VENDORED = ("yaml", "pynvml", "rfc8785", "prometheus_client")

#: navarch modules the agent imports inside functions on its run path.
LAZY_MODULES = ("navarch", "navarch.report.signing", "navarch.stores.file", "navarch.agent.store")

#: The directory the systemd unit names in NAVARCH_BUNDLE_CACHE (under its ReadWritePaths).
BUNDLE_CACHE = "/var/lib/navarch/bundle"

#: Builder-side only (reads this installation's sources); never imported by an agent run.
_NOT_BUNDLED = frozenset({"navarch.agent.bundle"})

_MAIN = b"""\
# navarch node agent bundle (zipapp): python3 -I -S navarch-agent.pyz run --once
# With NAVARCH_BUNDLE_CACHE=DIR (the systemd unit sets it), the bundle is unpacked once per
# content into DIR/<sha256 prefix>/ and imported from there, so Python caches its bytecode:
# a zip import compiles every module from source on every run.
# Kept to syntax every Python 3 parses: an older interpreter must reach the version check.
import os
import sys

if sys.version_info < (3, 9):
    sys.stderr.write("navarch: the agent bundle needs Python 3.9 or newer; %s is Python %s\\n"
                     % (sys.executable or "python3", sys.version.split()[0]))
    sys.exit(1)


def _unpacked(cache):
    import hashlib
    import shutil
    import tempfile
    import zipfile

    bundle = os.path.dirname(os.path.abspath(__file__))
    with open(bundle, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()[:16]
    target = os.path.join(cache, digest)
    if not os.path.isfile(os.path.join(target, "__main__.py")):
        os.makedirs(cache, mode=0o700, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".unpack-", dir=cache)
        zipfile.ZipFile(bundle).extractall(tmp)
        try:
            os.rename(tmp, target)
        except OSError:  # another run unpacked it first
            shutil.rmtree(tmp, ignore_errors=True)
    for name in os.listdir(cache):  # earlier bundles' trees
        if name != digest:
            shutil.rmtree(os.path.join(cache, name), ignore_errors=True)
    return target


_cache = os.environ.get("NAVARCH_BUNDLE_CACHE")
if _cache:
    try:
        sys.path[0] = _unpacked(_cache)
    except OSError as exc:  # not writable: run from the zip, slower but the same code
        sys.stderr.write("navarch: bundle cache %s unusable (%s); running from the zip\\n"
                         % (_cache, exc))

from navarch.agent.__main__ import main  # noqa: E402

sys.exit(main(bundled=True))
"""
_EPOCH = (1980, 1, 1, 0, 0, 0)
_MODE = 0o644 << 16


@dataclass(frozen=True)
class AgentBundle:
    """A built bundle: its bytes, sha256 (hex), version (navarch's), and store key."""

    data: bytes
    sha256: str
    version: str

    @property
    def size_bytes(self) -> int:
        """Length of the zip file in bytes."""
        return len(self.data)

    @property
    def key(self) -> str:
        """Content-addressed store key: agent/<version>-<sha256>.pyz."""
        return f"agent/{self.version}-{self.sha256}.pyz"


def _package_root() -> Path:
    return Path(navarch.__file__).resolve().parent


def _module_file(name: str) -> Path:
    root = _package_root()
    rel = Path(*name.split(".")[1:])
    package = root / rel / "__init__.py"
    return package if package.is_file() else root / rel.with_suffix(".py")


def _top_level_navarch_imports(path: Path, name: str) -> set[str]:
    """navarch modules `path` imports at module level (not inside functions)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "navarch")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            if base.split(".")[0] != "navarch":
                continue
            found.add(base)
            for alias in node.names:
                if _module_file(f"{base}.{alias.name}").is_file():
                    found.add(f"{base}.{alias.name}")
    return found


def _navarch_modules() -> list[str]:
    """Dotted names of the navarch modules the bundle carries, sorted."""
    agent_dir = _package_root() / "agent"
    # Subpackages too (acceptance_tools): the agent may import their modules lazily.
    todo = [
        ".".join(("navarch", "agent", *p.relative_to(agent_dir).with_suffix("").parts))
        for p in agent_dir.rglob("*.py")
        if "__pycache__" not in p.parts
    ]
    todo = [name.removesuffix(".__init__") for name in todo]
    todo += ["navarch.agent", *LAZY_MODULES]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name in _NOT_BUNDLED:
            continue
        path = _module_file(name)
        if not path.is_file():
            raise FileNotFoundError(f"navarch module {name} not found at {path}")
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # the packages
        todo += sorted(_top_level_navarch_imports(path, name))
    return sorted(seen)


def _vendored_files(top: str) -> list[tuple[str, Path]]:
    """(arcname, file) of one pure-Python library: its .py files and py.typed, no .so."""
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(
            f"{top} is not installed; the agent bundle vendors it (pip install navarch installs it)"
        )
    origin = Path(spec.origin)
    if origin.name != "__init__.py":
        return [(origin.name, origin)]
    out = []
    for path in sorted(origin.parent.rglob("*")):
        if "__pycache__" in path.parts or not path.is_file():
            continue
        if path.suffix == ".py" or path.name == "py.typed":
            out.append((f"{top}/{path.relative_to(origin.parent).as_posix()}", path))
    return out


def bundle_members() -> list[tuple[str, Path]]:
    """(arcname, source file) of every file in the bundle but ``__main__.py``, sorted.

    Raises ModuleNotFoundError when a vendored library is not installed here.
    """
    root = _package_root()
    members = [
        (_module_file(m).relative_to(root.parent).as_posix(), _module_file(m))
        for m in _navarch_modules()
    ]
    for top in VENDORED:
        members += _vendored_files(top)
    return sorted(members)


def build_bundle() -> AgentBundle:
    """Build the agent bundle in memory (reproducible: same sources, same sha256).

    Returns AgentBundle(data, sha256, version). Raises ModuleNotFoundError when a
    vendored library is missing, OSError when a source cannot be read. Format: PEP 441
    zipapp (a zip with __main__.py at its root, led by a ``#!/usr/bin/env python3`` line).
    """
    buf = io.BytesIO()
    buf.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(buf, "a", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        entries = [("__main__.py", _MAIN)]
        entries += [(arc, path.read_bytes()) for arc, path in bundle_members()]
        for arcname, data in entries:
            info = zipfile.ZipInfo(arcname, date_time=_EPOCH)
            info.external_attr = _MODE
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data, compresslevel=9)
    data = buf.getvalue()
    return AgentBundle(
        data=data, sha256=hashlib.sha256(data).hexdigest(), version=navarch.__version__
    )


def write_bundle(out: str | Path) -> AgentBundle:
    """Build the bundle and write it to `out` (mode 0755, replaced atomically).

    Raises OSError when it cannot be written.
    """
    bundle = build_bundle()
    target = Path(out)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_bytes(bundle.data)
    tmp.chmod(0o755)
    tmp.replace(target)
    return bundle
