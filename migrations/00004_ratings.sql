-- +goose Up
-- One rating per (item, user); the newest rating.set (by ranking stream position) wins.
CREATE TABLE ratings (
    item_id    text        NOT NULL,
    user_id    text        NOT NULL,
    stars      smallint    NOT NULL CHECK (stars BETWEEN 1 AND 5),
    pos_ms     bigint      NOT NULL DEFAULT 0,
    pos_seq    bigint      NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (item_id, user_id)
);

-- +goose Down
DROP TABLE ratings;
