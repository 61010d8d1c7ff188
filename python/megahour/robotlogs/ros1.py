"""ROS 1 bags (format 2.0), read with ``rosbags``; message types the bag defines beyond the stock
ROS 1 (Noetic) set are registered from the definitions stored in the bag."""

from __future__ import annotations

from pathlib import Path

from megahour.episodes.errors import CorruptEpisodeError
from megahour.episodes.model import Message, RawSchema
from megahour.robotlogs.convert import Streams
from megahour.robotlogs.mapping import RobotMapping
from megahour.robotlogs.rosmsg import Router

FORMAT = "ros1-bag"
MAGIC = b"#ROSBAG V2.0\n"


def read_streams(path: str | Path, mapping: RobotMapping) -> Streams:
    from rosbags.rosbag1 import Reader, ReaderError
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    path = str(path)
    streams = Streams(source=path, format=FORMAT)
    router = Router(streams, mapping)
    typestore = get_typestore(Stores.ROS1_NOETIC)
    try:
        with Reader(path) as reader:
            recorded = {c.topic for c in reader.connections}
            router.require(recorded, "bag")
            wanted = [c for c in reader.connections if router.wants(c.topic)]
            # Every other topic travels as recorded: ROS 1 serialization, its message definition.
            carried: dict[str, list[Message]] = {}
            for connection in reader.connections:
                if not router.wants(connection.topic):
                    raw = RawSchema(connection.msgtype, "ros1msg", connection.msgdef.data.encode(), "ros1")
                    carried[connection.topic] = streams.carry(connection.topic, raw)
            others = [c for c in reader.connections if c.topic in carried]
            # rosbags reads every connection when given none: only ask when something is carried.
            for connection, timestamp, raw_bytes in reader.messages(connections=others) if others else ():
                carried[connection.topic].append(Message(timestamp, bytes(raw_bytes)))
            for connection in wanted:
                router.check_type(connection.topic, connection.msgtype)
                if connection.msgtype not in typestore.types:
                    typestore.register(get_types_from_msg(connection.msgdef.data, connection.msgtype))
            for connection, timestamp, raw in reader.messages(connections=wanted):
                message = typestore.deserialize_ros1(raw, connection.msgtype)
                router.add(connection.topic, connection.msgtype, message, timestamp)
    except ReaderError as exc:
        raise CorruptEpisodeError(
            path,
            f"the bag does not read: {exc}",
            fix="if the recording was cut short, run `rosbag reindex` on it, then convert it again",
        ) from None
    return streams
