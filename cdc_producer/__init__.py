"""cdc-producer: follows the leader's binlog and publishes change events onto a topic."""
