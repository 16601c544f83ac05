"""The catalog's tables, written once and rendered per SQL engine (as its statements are: dialect.py): what
differs between SQLite and Postgres in a table's definition is named by a token and filled by the engine's
`SchemaDialect`. Each part's migration steps are these texts, in order; an engine whose history took other steps
keeps them (SQLite's versions table grew its audit columns by a step of its own)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True, slots=True)
class SchemaDialect:
    if_not_exists: str  # SQLite's catalogs were made with it; Postgres' steps run once under a lock
    if_exists: str
    serial: str  # an insertion-ordered integer key
    small_serial: str  # an integer key of a small table (ids never reused need no AUTOINCREMENT there)
    binary: str  # bytes: a hash's 32, a compressed document
    prefix_ops: str  # the index operator class that serves `LIKE 'prefix%'`
    boolean: str
    bigint: str
    real: str
    references_jobs: str  # a job item's foreign key, where the engine holds it


SQLITE = SchemaDialect(
    "IF NOT EXISTS",
    "IF EXISTS",
    "INTEGER PRIMARY KEY AUTOINCREMENT",
    "INTEGER PRIMARY KEY",
    "BLOB",
    "",
    "INTEGER",
    "INTEGER",
    "REAL",
    "",
)
POSTGRES = SchemaDialect(
    "",
    "IF EXISTS",
    "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    "INTEGER GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    "BYTEA",
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

# Versions as they are kept since the size issue (#53): what repeats across rows stored once and referenced (a
# key space: model revision, backend, featureset; a fingerprint; a prompt's sample), hashes as their 32 bytes, the
# rest of the manifest compressed (`versions/manifest_rows.py`), and what an operator asks often kept current
# in `tallies` (per key space) instead of counted. `attention` marks a version flagged, damaged or suspect (bits of
# `manifest_rows.Attention`); only those are in its partial index, so `health` lists them without a scan.
NORMALIZED = """
CREATE TABLE {if_not_exists} key_spaces (
    id             {small_serial},
    model_revision TEXT NOT NULL,
    backend        TEXT NOT NULL,
    featureset_id  TEXT NOT NULL,
    featureset     TEXT NOT NULL,
    UNIQUE (model_revision, backend, featureset_id)
);
CREATE TABLE {if_not_exists} fingerprints (
    id       {small_serial},
    digest   TEXT NOT NULL UNIQUE,
    document TEXT NOT NULL
);
CREATE TABLE {if_not_exists} samples (
    prompt_hash {binary} PRIMARY KEY,
    sample      TEXT NOT NULL
);
CREATE TABLE {if_not_exists} entry_versions (
    seq          {serial},
    prompt_hash  {binary} NOT NULL,
    space        INTEGER NOT NULL,
    content_hash {binary} NOT NULL,
    fingerprint  INTEGER NOT NULL,
    num_tokens   INTEGER NOT NULL,
    created_at   TEXT NOT NULL,
    attention    INTEGER NOT NULL DEFAULT 0,
    body         {binary} NOT NULL,
    audit        TEXT,
    integrity    TEXT,
    UNIQUE (prompt_hash, space, content_hash)
);
CREATE INDEX {if_not_exists} entry_versions_content ON entry_versions (content_hash);
CREATE INDEX {if_not_exists} entry_versions_space ON entry_versions (space, seq);
CREATE INDEX {if_not_exists} entry_versions_attention ON entry_versions (seq) WHERE attention <> 0;
CREATE TABLE {if_not_exists} tallies (
    space    INTEGER PRIMARY KEY,
    entries  {bigint} NOT NULL DEFAULT 0,
    tokens   {bigint} NOT NULL DEFAULT 0,
    bytes    {bigint} NOT NULL DEFAULT 0,
    flagged  {bigint} NOT NULL DEFAULT 0,
    damaged  {bigint} NOT NULL DEFAULT 0,
    suspect  {bigint} NOT NULL DEFAULT 0
)
"""
# Versions never checked (neither re-extracted by an audit nor read back by a scrub), counted once here and kept
# current from then on by every write and mark (manifest_rows.TALLY)
TALLY_UNCHECKED = """
ALTER TABLE tallies ADD COLUMN unchecked {bigint} NOT NULL DEFAULT 0;
UPDATE tallies SET unchecked = (
    SELECT COUNT(*) FROM entry_versions v WHERE v.space = tallies.space AND v.audit IS NULL AND v.integrity IS NULL
)
"""
# a prompt hash of the rule before the normal form -> the key its sample has now (`service/catalog/upgrades/rekey.py`)
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

# A job's counts kept current as its items are finished (a status poll reads one row, not 10^6 items), and the
# index a claim reads in order: a job's pending items by backend and index, the first few without a sort
JOB_TALLIES = """
ALTER TABLE jobs ADD COLUMN items_total {bigint} NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN items_done {bigint} NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN items_failed {bigint} NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN completions_fetched {bigint} NOT NULL DEFAULT 0;
UPDATE jobs SET
    items_total = (SELECT COUNT(*) FROM job_items i WHERE i.job_id = jobs.id),
    items_done = (SELECT COUNT(*) FROM job_items i WHERE i.job_id = jobs.id AND i.state = 'done'),
    items_failed = (SELECT COUNT(*) FROM job_items i WHERE i.job_id = jobs.id AND i.state = 'failed'),
    completions_fetched = (SELECT COUNT(*) FROM job_items i WHERE i.job_id = jobs.id AND i.completion_ids IS NOT NULL);
DROP INDEX {if_exists} job_items_pending;
CREATE INDEX {if_not_exists} job_items_claim ON job_items (job_id, state, backend, idx)
"""

# The items under a lease, a few per worker whatever a job's size (a finished or released item has none): the
# heartbeat's renewal, `hsstore workers` and every metrics scrape read them through this, not the table
JOB_LEASE_INDEX = (
    "CREATE INDEX {if_not_exists} job_items_leased ON job_items (lease_owner, job_id) WHERE lease_owner IS NOT NULL"
)

KV = "CREATE TABLE {if_not_exists} kv (name TEXT PRIMARY KEY, value TEXT)"


def render(ddl: str, dialect: SchemaDialect) -> str:
    return ddl.format(**asdict(dialect))
