-- API tokens (agent.Tokens): one row per token, kept after revocation. The
-- token itself is never stored: token_hash is the hex SHA-256 of the token
-- string, nats_password_hash its bcrypt hash for a generated nats-server
-- configuration. Keep in step with ../sqlite/00003_api_tokens.sql.

-- +goose Up
CREATE TABLE api_tokens (
    token_id           TEXT        PRIMARY KEY,
    tenant_id          TEXT        NOT NULL,
    admin              BOOLEAN     NOT NULL DEFAULT false,
    token_hash         TEXT        NOT NULL UNIQUE,
    nats_password_hash TEXT        NOT NULL DEFAULT '',
    created_at         TIMESTAMPTZ NOT NULL,
    revoked_at         TIMESTAMPTZ
);

-- +goose Down
DROP TABLE api_tokens;
