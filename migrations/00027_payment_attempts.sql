-- +goose Up
-- Checkout attempts are recorded when their session opens (payment.opened), before any money
-- moves: status 'open' until the payment succeeds (order.paid) or is refunded. The attempt id
-- (metadata flashsale_attempt) is how a payment is known to be this shop's, so it is indexed:
-- the money check and a restore look payments up by it.
ALTER TABLE payments DROP CONSTRAINT payments_status_check;
ALTER TABLE payments ADD CONSTRAINT payments_status_check
    CHECK (status IN ('open', 'succeeded', 'refunded'));
CREATE INDEX payments_attempt ON payments (attempt) WHERE attempt IS NOT NULL;

-- +goose Down
DROP INDEX payments_attempt;
DELETE FROM payments WHERE status = 'open';
ALTER TABLE payments DROP CONSTRAINT payments_status_check;
ALTER TABLE payments ADD CONSTRAINT payments_status_check
    CHECK (status IN ('succeeded', 'refunded'));
