"""Topic backends behind one interface (see base.py), chosen by the profile's [stream]."""

from __future__ import annotations

from cdc_stream.profile import Stream as StreamSettings
from cdc_stream.topics.base import Record, Stream, Topic, TopicError, TopicNotFound

__all__ = ["Record", "Stream", "Topic", "TopicError", "TopicNotFound", "open_stream"]


def open_stream(settings: StreamSettings, create: bool = True) -> Stream:
    """Open the stream a profile's [stream] section describes."""
    if settings.backend == "fluvio":
        from cdc_stream.topics.fluvio import FluvioStream

        return FluvioStream(
            endpoint=settings.fluvio_endpoint,
            profile=settings.fluvio_profile,
            partitions=settings.partitions,
            retention_seconds=settings.retention_seconds,
        )
    from cdc_stream.topics.embedded import EmbeddedStream

    return EmbeddedStream(settings.path, create=create)
