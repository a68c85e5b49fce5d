-- Pipelines deployed over the API (docs/pipeline-deploy.md,
-- pipeline/deployed/). zone is '' on the Org API, the zone's name on a
-- Zone API: an org and each of its zones have their own components,
-- versions and activations, and share nothing.
--
-- A component an org stored: its bytes are in the lake's object store
-- under _pipeline/components/<hex>.wasm (by content, shared by whoever
-- stored the same bytes); this row is what makes it the org's.
CREATE TABLE pipeline_components (
    org TEXT NOT NULL,
    zone TEXT NOT NULL,
    digest TEXT NOT NULL,
    bytes BIGINT NOT NULL,
    -- 'step' or 'daily-step'.
    world TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (org, zone, digest)
);
-- Every replica compiles what was stored since it last looked.
CREATE INDEX pipeline_components_by_time ON pipeline_components (created_at);

-- A manifest version: immutable, numbered from 1 per org, zone and kind
-- ('load' or 'daily'). Its steps are the manifest text's.
CREATE TABLE pipeline_versions (
    org TEXT NOT NULL,
    zone TEXT NOT NULL,
    kind TEXT NOT NULL,
    version BIGINT NOT NULL,
    digest TEXT NOT NULL,
    manifest TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (org, zone, kind, version)
);

-- Activations, in order (seq from 1): the last one is the pipeline that
-- commits beginning now run; a NULL version hands it back to the
-- operator's files.
CREATE TABLE pipeline_activations (
    org TEXT NOT NULL,
    zone TEXT NOT NULL,
    kind TEXT NOT NULL,
    seq BIGINT NOT NULL,
    version BIGINT,
    activated_by TEXT NOT NULL,
    activated_at BIGINT NOT NULL,
    PRIMARY KEY (org, zone, kind, seq)
);

-- What judged a load: the pipeline its commit ran and each step's outcome.
CREATE TABLE load_pipelines (
    load_id TEXT PRIMARY KEY,
    -- 'version', 'files' or 'built-in'.
    source TEXT NOT NULL,
    version BIGINT,
    digest TEXT,
    steps_json TEXT NOT NULL,
    recorded_at BIGINT NOT NULL
);

-- The load pipeline's shadow per scope (kind is always 'load'): a version
-- whose steps also run beside each commit, read-only, deciding nothing. A
-- NULL version: no shadow.
CREATE TABLE pipeline_shadows (
    org TEXT NOT NULL,
    zone TEXT NOT NULL,
    version BIGINT,
    set_by TEXT NOT NULL,
    set_at BIGINT NOT NULL,
    PRIMARY KEY (org, zone)
);

-- Each commit a shadow ran beside: both outcomes, and whether they agree.
CREATE TABLE shadow_runs (
    load_id TEXT PRIMARY KEY,
    org TEXT NOT NULL,
    zone TEXT NOT NULL,
    version BIGINT NOT NULL,
    agreed BIGINT NOT NULL,
    active_outcome TEXT NOT NULL,
    shadow_outcome TEXT NOT NULL,
    -- The shadow step that decided its outcome, and its message.
    step TEXT,
    message TEXT,
    steps_json TEXT NOT NULL,
    ran_at BIGINT NOT NULL
);
CREATE INDEX shadow_runs_by_scope ON shadow_runs (org, zone, version, ran_at);
