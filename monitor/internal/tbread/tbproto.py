"""Loads tensorboard.Event from tensorboard_event.binpb with python3-protobuf.

tensorboard_event.binpb is a FileDescriptorSet compiled by protoc from
TensorBoard's own event.proto and the files it imports (see regen.sh), so the
message classes built here use the real schema, not a transcription of it.
"""
import os

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

HERE = os.path.dirname(os.path.abspath(__file__))


def event_classes(path=os.path.join(HERE, "tensorboard_event.binpb")):
    fds = descriptor_pb2.FileDescriptorSet()
    with open(path, "rb") as f:
        fds.ParseFromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fdp in fds.file:
        pool.Add(fdp)

    def cls(name):
        desc = pool.FindMessageTypeByName(name)
        if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
            return message_factory.GetMessageClass(desc)
        return message_factory.MessageFactory(pool).GetPrototype(desc)

    return cls("tensorboard.Event"), cls("tensorboard.Summary")


def masked_crc32c(data):
    import crc32c  # Debian python3-crc32c

    x = crc32c.crc32c(data) & 0xFFFFFFFF
    return (((x >> 15) | (x << 17)) + 0xA282EAD8) & 0xFFFFFFFF
