"""A prepared dataset's record of verified files: ``<data dir>/manifest.json``.

The step that decodes every image of a dataset once (``download_data.sh --verify``, or the
conversion that wrote the files) records each file's size and modification time with what it found
(record count, label range). Training and evaluation trust a file whose size and time still match
its entry and check again only the files that are new or changed since::

    manifest = DataManifest.read(data_dir)
    facts = manifest.lookup(path)  # None: never verified, or changed since
    ...
    manifest.record(path, records=1250, labels=[0, 999])
    manifest.write()

A missing or unreadable manifest is an empty one: everything is checked again.
"""

from __future__ import annotations

import json
import os
import pathlib

MANIFEST_NAME = "manifest.json"


def fingerprint(path) -> dict:
    """{size, mtime_ns} of ``path``: what must still match for its entry to be trusted."""
    stat = os.stat(path)
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


class DataManifest:
    """The entries of one data directory's manifest, keyed by file name relative to it."""

    def __init__(self, data_dir, files: dict | None = None):
        self.data_dir = pathlib.Path(data_dir)
        self.files = dict(files or {})

    @property
    def path(self) -> pathlib.Path:
        return self.data_dir / MANIFEST_NAME

    @classmethod
    def read(cls, data_dir) -> DataManifest:
        path = pathlib.Path(data_dir) / MANIFEST_NAME
        try:
            files = json.loads(path.read_text())["files"]
        except (OSError, ValueError, KeyError, TypeError):
            files = {}
        return cls(data_dir, files if isinstance(files, dict) else {})

    def _key(self, path) -> str:
        # not resolved: a shard may be a symbolic link to a file elsewhere
        return os.path.relpath(os.path.abspath(path), os.path.abspath(self.data_dir))

    def lookup(self, path) -> dict | None:
        """The facts recorded for ``path``, or None when it has no entry or changed since."""
        entry = self.files.get(self._key(path))
        try:
            current = fingerprint(path)
        except OSError:
            return None
        if not isinstance(entry, dict) or any(entry.get(k) != v for k, v in current.items()):
            return None
        return entry

    def record(self, path, **facts) -> None:
        """Enter ``path`` as verified now, with ``facts`` (JSON values) about its content."""
        self.files[self._key(path)] = {**fingerprint(path), **facts}

    def write(self) -> pathlib.Path:
        """Write the manifest atomically (a reader never sees half of it)."""
        from zoo.io import atomic_write

        with atomic_write(self.path) as tmp:
            tmp.write_text(json.dumps({"files": self.files}, indent=1, sort_keys=True) + "\n")
        return self.path
