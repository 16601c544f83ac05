"""The catalog's tables, written once and rendered per SQL engine (as its statements are: sql_dialect.py): what
differs between SQLite and Postgres in a table's definition is named by a token and filled by the engine's
`SchemaDialect`. Each part's migration steps are these texts, in order; an engine whose history took other steps
keeps them (SQLite's versions table grew its audit columns by a step of its own)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True, slots=True)
class SchemaDialect:
    if_not_exists: str  # SQLite's catalogs were made with it; Postgres' steps run once under a lock
    serial: str  # an insertion-ordered integer key
    prefix_ops: str  # the index operator class that serves `LIKE 'prefix%'`
    boolean: str
    bigint: str
    real: str
    references_jobs: str  # a job item's foreign key, where the engine holds it


SQLITE = SchemaDialect("IF NOT EXISTS", "INTEGER PRIMARY KEY AUTOINCREMENT", "", "INTEGER", "INTEGER", "REAL", "")
POSTGRES = SchemaDialect(
    "",
    "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    "text_pattern_ops",
    "BOOLEAN",
    "BIGINT",
    "DOUBLE PRECISION",
    "REFERENCES jobs (id)",
)

VERSIONS = """
CREATE TABLE {if_not_exists} versions (
    seq            {serial},
    prompt_hash    TEXT NOT NULL,
    model_revision TEXT NOT NULL,
    backend        TEXT NOT NULL,
    featureset_id  TEXT NOT NULL,
    content_hash   TEXT NOT NULL,
    created_at     TEXT NOT NULL,
    manifest       TEXT NOT NULL,
    audit          TEXT,
    integrity      TEXT,
    UNIQUE (prompt_hash, model_revision, backend, featureset_id, content_hash)
);
CREATE INDEX {if_not_exists} versions_prompt ON versions (prompt_hash {prefix_ops});
CREATE INDEX {if_not_exists} versions_content ON versions (content_hash {prefix_ops});
CREATE INDEX {if_not_exists} versions_created ON versions (created_at)
"""

# a prompt hash of the rule before the normal form -> the key its sample has now (`service/catalog/rekey.py`)
PROMPT_ALIASES = "CREATE TABLE {if_not_exists} prompt_aliases (old_hash TEXT PRIMARY KEY, prompt_hash TEXT NOT NULL)"

JOBS = """
CREATE TABLE {if_not_exists} jobs (
    id          TEXT PRIMARY KEY,
    state       TEXT NOT NULL,
    priority    INTEGER NOT NULL,
    run_now     {boolean} NOT NULL,
    backends    TEXT NOT NULL,
    featureset  TEXT NOT NULL,
    completion  TEXT,
    created_at  TEXT NOT NULL,
    started_at  TEXT,
    finished_at TEXT,
    tokens      {bigint} NOT NULL DEFAULT 0,
    busy_s      {real} NOT NULL DEFAULT 0,
    error       TEXT
);
CREATE INDEX {if_not_exists} jobs_id ON jobs (id {prefix_ops});
CREATE TABLE {if_not_exists} job_items (
    job_id            TEXT NOT NULL {references_jobs},
    idx               INTEGER NOT NULL,
    backend           TEXT NOT NULL,
    sample            TEXT NOT NULL,
    prompt_hash       TEXT NOT NULL,
    state             TEXT NOT NULL,
    error             TEXT,
    content_hash      TEXT,
    greedy_tokens     INTEGER,
    completion_ids    TEXT,
    completion_source TEXT,
    PRIMARY KEY (job_id, idx, backend)
);
CREATE INDEX {if_not_exists} job_items_pending ON job_items (job_id, state)
"""
JOB_LEASES = "ALTER TABLE job_items ADD COLUMN lease_owner TEXT; ALTER TABLE job_items ADD COLUMN lease_until {real}"
JOBS_EXISTING = "ALTER TABLE jobs ADD COLUMN existing INTEGER NOT NULL DEFAULT 0"  # items found already stored

KV = "CREATE TABLE {if_not_exists} kv (name TEXT PRIMARY KEY, value TEXT)"


def render(ddl: str, dialect: SchemaDialect) -> str:
    return ddl.format(**asdict(dialect))
