-- outbox/confirm.lua: a run that writes nothing but its call record (once.lua). The relay runs
-- it, with a WAIT behind it, before publishing entries read from an outbox stream: once the
-- replicas hold this record they hold every entry written before it, so Kafka (and Postgres)
-- never get an event a promoted replica lacks. A script, because WAIT needs a write in the
-- stream's slot on the connection that asks (a read alone would confirm nothing).
-- Go caller: outbox.Relay.publish (internal/outbox/relay.go).
-- KEYS[1] the outbox stream (only its slot matters). ARGV: none. Reply: 1.

return 1
