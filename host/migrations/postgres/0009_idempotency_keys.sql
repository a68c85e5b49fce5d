-- Idempotency-Key on POST /query, POST /load and POST /load/{id}/commit
-- (api/idempotency.rs): one row per caller (org, zone, token subject) and
-- key, kept 24 hours from the first request (expires_at; expired rows are
-- swept, and a key whose row expired is free again). The first request
-- claims the row (claim = its own id, pending_until = how long the claim
-- holds) and records its answer (status, headers, body); a request that
-- fails deletes its row, so a retry runs again. Every replica on this store
-- answers a retry the same way.
CREATE TABLE idempotency_keys (
    org TEXT NOT NULL,
    zone TEXT NOT NULL,
    owner_sub TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    -- The request the key was first used for: its operation (method and
    -- path), a SHA-256 of the operation and its canonical body, and the
    -- caller's access fingerprint (roles and service clients).
    operation TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    access_fingerprint TEXT NOT NULL,
    claim TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    -- Set while the first request is in progress; past it, a dead replica's
    -- claim is taken over by the next retry.
    pending_until BIGINT,
    -- The first answer, NULL while in progress.
    status BIGINT,
    headers_json TEXT,
    body BYTEA,
    PRIMARY KEY (org, zone, owner_sub, idempotency_key)
);
CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);
