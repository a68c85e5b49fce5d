-- The embedded identity provider's state, shared by every replica (idp/),
-- so that a token or a login code from one replica is good on all of them.
--
-- A realm's RSA signing keys, numbered from 1 per realm. A rotation
-- inserts number n + 1: replicas that race insert exactly one (the primary
-- key decides, the losers read the winner's). A key is published in the
-- realm's JWKS from its insert and signs from active_from (its created_at
-- plus idp.key_publish_lead_s; the realm's first key, and keys imported from
-- an older version's signing-keys.json, at once). Times in microseconds.
CREATE TABLE idp_signing_keys (
    org TEXT NOT NULL,
    generation BIGINT NOT NULL,
    kid TEXT NOT NULL,
    -- The private key, PKCS#8 PEM.
    private_key_pem TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    active_from BIGINT NOT NULL,
    PRIMARY KEY (org, generation),
    UNIQUE (org, kid)
);

-- The PKCE login flow's pending authorization codes, by the SHA-256 (hex)
-- of the code (the code itself is never stored): issued on one replica,
-- exchanged on any, deleted by the exchange (single use) or once expired.
CREATE TABLE idp_login_codes (
    code_hash TEXT PRIMARY KEY,
    org TEXT NOT NULL,
    client_id TEXT NOT NULL,
    redirect_uri TEXT NOT NULL,
    code_challenge TEXT NOT NULL,
    username TEXT NOT NULL,
    scope TEXT NOT NULL,
    nonce TEXT,
    expires_at BIGINT NOT NULL
);
CREATE INDEX idp_login_codes_by_expiry ON idp_login_codes (expires_at);
