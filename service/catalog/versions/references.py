"""What a catalog's version rows reference, written once and never changed: key spaces (model revision, backend,
featureset) and fingerprints, each under a small id. Cached here by id and by content; read again only for an id
another process began (a key space is a run's: a handful in a store of millions)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from schemas.keys import EntryFilter, EntryKey
from schemas.manifest import Manifest
from service.catalog.versions.manifest_rows import KeySpace, fingerprint_row

# the migration that moved the first schema's rows in writes them alike
INSERT_SPACE = (
    "INSERT INTO key_spaces (model_revision, backend, featureset_id, featureset) VALUES (?, ?, ?, ?)"
    " ON CONFLICT DO NOTHING"
)
SPACE_ID = "SELECT id FROM key_spaces WHERE model_revision = ? AND backend = ? AND featureset_id = ?"
INSERT_FINGERPRINT = "INSERT INTO fingerprints (digest, document) VALUES (?, ?) ON CONFLICT DO NOTHING"
FINGERPRINT_ID = "SELECT id FROM fingerprints WHERE digest = ?"


class References:
    def __init__(self, db: Any, sql: Callable[[str], str]) -> None:
        self.db, self.sql = db, sql  # the engine's database, and its statements' placeholder
        self._spaces: dict[int, KeySpace] = {}
        self._space_ids: dict[tuple[str, str, str], int] = {}
        self._fingerprints: dict[int, str] = {}
        self._fingerprint_ids: dict[str, int] = {}

    def space_id(self, manifest: Manifest) -> int:
        parts = (manifest.model_revision, manifest.backend, manifest.featureset_id)
        if (known := self._space_ids.get(parts)) is not None:
            return known
        space = KeySpace.of(manifest)
        with self.db.writing() as conn:
            conn.execute(self.sql(INSERT_SPACE), (*parts, space.featureset))
            row = conn.execute(self.sql(SPACE_ID), parts).fetchone()
        self._space_ids[parts] = int(row[0])
        return int(row[0])

    def fingerprint_id(self, manifest: Manifest) -> int:
        digest, document = fingerprint_row(manifest.fingerprint)
        if (known := self._fingerprint_ids.get(digest)) is not None:
            return known
        with self.db.writing() as conn:
            conn.execute(self.sql(INSERT_FINGERPRINT), (digest, document))
            row = conn.execute(self.sql(FINGERPRINT_ID), (digest,)).fetchone()
        self._fingerprint_ids[digest] = int(row[0])
        return int(row[0])

    def space(self, space: int) -> KeySpace:
        if (known := self._spaces.get(space)) is None:
            self._load()
            known = self._spaces[space]
        return known

    def _load(self) -> None:
        with self.db.connection() as conn:
            rows = conn.execute("SELECT id, model_revision, backend, featureset_id, featureset FROM key_spaces")
            for space, *parts in rows.fetchall():
                self._spaces[int(space)] = KeySpace(*parts)
                self._space_ids[(parts[0], parts[1], parts[2])] = int(space)

    def matching(self, where: EntryFilter) -> list[int] | None:
        """The key spaces a filter's model revision, backend and featureset admit (None: it names none of them)."""
        wanted = {
            "model_revision": where.model_revision,
            "backend": where.backend,
            "featureset_id": where.featureset_id,
        }
        if all(value is None for value in wanted.values()):
            return None
        self._load()  # another process may have begun a key space since
        return [
            space
            for space, parts in self._spaces.items()
            if all(value is None or getattr(parts, name) == value for name, value in wanted.items())
        ]

    def fingerprint(self, fingerprint: int) -> str:
        if (known := self._fingerprints.get(fingerprint)) is None:
            with self.db.connection() as conn:
                row = conn.execute(self.sql("SELECT document FROM fingerprints WHERE id = ?"), (fingerprint,))
                known = str(row.fetchone()[0])
            self._fingerprints[fingerprint] = known
        return known

    def key_space(self, key: EntryKey) -> int | None:
        """The key space of an entry key, if any version was ever stored under it."""
        parts = (key.model_revision, key.backend, key.featureset_id)
        if parts not in self._space_ids:
            self._load()
        return self._space_ids.get(parts)
