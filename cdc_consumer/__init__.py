"""cdc-consumer: replays change events from a topic onto a follower."""
