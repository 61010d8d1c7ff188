"""ROS 2 recordings in MCAP (CDR messages, ``ros2msg`` schemas), as ``ros2 bag record -s mcap`` writes them.

The file is read by the whole-file scanner (so recordings without a summary, or cut short by a crash,
read too) and each message is decoded by the official ROS 2 MCAP support (``mcap_ros2``), from the
message definitions the file itself carries.
"""

from __future__ import annotations

from pathlib import Path

from mcap.records import Schema

from megahour.episodes import mcapscan
from megahour.episodes.errors import EpisodeError
from megahour.episodes.model import Message, RawSchema
from megahour.episodes.source import LocalSource
from megahour.robotlogs.convert import Streams
from megahour.robotlogs.mapping import RobotMapping
from megahour.robotlogs.rosmsg import Router

FORMAT = "ros2-mcap"


def read_streams(path: str | Path, mapping: RobotMapping) -> Streams:
    from mcap_ros2.decoder import DecoderFactory

    path = str(path)
    with LocalSource(path) as source:
        scan = mcapscan.scan(source)
    streams = Streams(source=path, format=FORMAT, warnings=list(scan.warnings))
    router = Router(streams, mapping)
    recorded = {channel.topic for channel in scan.channels.values()}
    router.require(recorded, "recording")
    factory = DecoderFactory()
    decoders = {}
    carried: dict[int, list[Message]] = {}
    for channel in scan.channels.values():
        if not router.wants(channel.topic):
            schema = scan.schemas.get(channel.schema_id)
            raw = RawSchema(
                schema.name if schema else "",
                schema.encoding if schema else "",
                schema.data if schema else b"",
                channel.message_encoding,
            )
            carried[channel.id] = streams.carry(channel.topic, raw)
            continue
        schema = scan.schemas.get(channel.schema_id)
        msgtype = schema.name if schema else ""
        router.check_type(channel.topic, msgtype)
        decoder = factory.decoder_for(
            channel.message_encoding,
            Schema(id=schema.id, name=schema.name, encoding=schema.encoding, data=schema.data)
            if schema
            else None,
        )
        if decoder is None:
            raise EpisodeError(
                path,
                f"messages in {channel.message_encoding!r} with a {schema.encoding if schema else 'missing'} "
                "schema are not ROS 2 CDR",
                topic=channel.topic,
                fix="record with ros2 bag record -s mcap (CDR messages, ros2msg schemas)",
            )
        decoders[channel.id] = (channel.topic, msgtype, decoder)
    for message in scan.messages:
        kept = carried.get(message.channel_id)
        if kept is not None:
            kept.append(Message(message.log_time, message.data))
            continue
        target = decoders.get(message.channel_id)
        if target is not None:
            topic, msgtype, decode = target
            router.add(topic, msgtype, decode(message.data), message.log_time)
    return streams
