"""The contract shared by cdc-producer, cdc-consumer, cdc-topic and the Spark audit."""
