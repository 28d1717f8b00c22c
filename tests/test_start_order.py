"""cdc-consumer and cdc-producer started in any order, also at the same instant (a service manager does
that): the consumer waits for its stream and topic, saying so every few seconds, on both backends."""

from __future__ import annotations

from harness import Cli, wait_for
from test_fluvio_pipeline import fluvio  # noqa: F401  (the Fluvio pipeline fixture)
from test_tutorial import EXPECTED_PET, STATEMENTS, run_sql

from cdc_consumer.run import WAITING_EVERY


def test_the_tutorial_with_both_programs_started_at_the_same_instant_consumer_first(pipeline):
    consumer_profile, producer_profile = pipeline.consumer_profile(), pipeline.producer_profile()
    consumer = pipeline.start_consumer_waiting(consumer_profile)
    producer = Cli(["cdc-producer", str(producer_profile)])
    pipeline.procs.append(producer)
    producer.wait_line("streaming from")
    consumer.wait_line("applying topic")
    run_sql(pipeline.leader, STATEMENTS)
    pipeline.wait_synced()
    assert pipeline.follower.rows("flvDb", "pet") == EXPECTED_PET
    assert consumer.stop() == 0 and producer.stop() == 0
    assert "Traceback" not in consumer.stderr + producer.stderr


def test_a_consumer_started_long_before_the_producer_says_it_waits_then_applies(pipeline):
    consumer = pipeline.start_consumer_waiting()
    wait_for(lambda: sum("waiting for topic" in line for line in consumer.lines) >= 2, 3 * WAITING_EVERY,
             "a second waiting line")
    first, second = [line for line in consumer.lines if "waiting for topic" in line][:2]
    assert first == second == (f"waiting for topic 'rust-mysql-cdc': no embedded stream at {pipeline.stream_path}: "
                               "check [stream] path (cdc-topic: --path), or start cdc-producer first to create it")
    assert consumer.exit_code() is None
    producer = pipeline.start_producer()
    consumer.wait_line("applying topic")
    run_sql(pipeline.leader, STATEMENTS)
    pipeline.wait_synced()
    assert pipeline.follower.rows("flvDb", "pet") == EXPECTED_PET
    assert consumer.stop() == 0 and producer.stop() == 0


def test_a_consumer_waits_for_its_fluvio_topic_to_be_created(fluvio):  # noqa: F811
    p = fluvio.p
    consumer = p.start_consumer_waiting(fluvio.consumer_profile())
    line = consumer.wait_line("waiting for topic")
    assert line == (f"waiting for topic '{fluvio.topic}': topic '{fluvio.topic}' does not exist on Fluvio at "
                    f"{fluvio.endpoint}; create it first (e.g. `fluvio topic create {fluvio.topic}`)")
    producer = p.start_producer(fluvio.producer_profile())
    consumer.wait_line("applying topic")
    run_sql(p.leader, STATEMENTS)
    fluvio.wait_synced()
    assert p.follower.rows("flvDb", "pet") == EXPECTED_PET
    assert consumer.stop() == 0 and producer.stop() == 0
