"""Writes monitor/tfevents/testdata/golden.tfevents: the events in
golden_events.json (beside it) as TensorBoard's
EventFileWriter writes them (tensorboard/summary/writer/event_file_writer.py
and record_writer.py): a file_version event, then one Event per scalar, each
serialized by python3-protobuf from the real schema and framed as a TFRecord.

Regenerate (Debian: apt-get install python3-protobuf python3-crc32c):
    /usr/bin/python3 gen_golden.py
"""
import json
import os
import struct

from tbproto import HERE, event_classes, masked_crc32c

GOLDEN = os.path.join(HERE, "..", "..", "tfevents", "testdata")


def record(data):
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc32c(header)) + data + struct.pack("<I", masked_crc32c(data))


def main():
    Event, _ = event_classes()
    with open(os.path.join(GOLDEN, "golden_events.json")) as f:
        spec = json.load(f)
    out = bytearray()
    ev = Event(wall_time=spec["file_version_wall_time_ns"] / 1e9, file_version="brain.Event:2")
    out += record(ev.SerializeToString())
    for e in spec["events"]:
        # torch.utils.tensorboard.summary.scalar with new_style=False
        ev = Event(wall_time=e["wall_time_ns"] / 1e9, step=int(e["step"]))
        ev.summary.value.add(tag=e["tag"], simple_value=float(e["value"]))
        out += record(ev.SerializeToString())
    with open(os.path.join(GOLDEN, "golden.tfevents"), "wb") as f:
        f.write(out)


if __name__ == "__main__":
    main()
