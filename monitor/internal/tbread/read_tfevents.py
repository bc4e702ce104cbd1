"""Reads an event file with python3-protobuf and the real TensorBoard schema,
checking both CRCs of every record, and prints one JSON object per record.

    /usr/bin/python3 read_tfevents.py FILE

Exit status 1 with a message on a bad CRC, a short record or a parse error.
"""
import json
import struct
import sys

from tbproto import event_classes, masked_crc32c


def records(data):
    off = 0
    while off < len(data):
        if len(data) - off < 12:
            raise ValueError("short record header at byte %d" % off)
        header = data[off:off + 8]
        (length,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", data[off + 8:off + 12])
        if hcrc != masked_crc32c(header):
            raise ValueError("bad length CRC at byte %d" % off)
        body = data[off + 12:off + 12 + length]
        tail = data[off + 12 + length:off + 16 + length]
        if len(body) != length or len(tail) != 4:
            raise ValueError("short record at byte %d" % off)
        if struct.unpack("<I", tail)[0] != masked_crc32c(body):
            raise ValueError("bad data CRC at byte %d" % off)
        yield body
        off += 16 + length


def main():
    Event, _ = event_classes()
    with open(sys.argv[1], "rb") as f:
        data = f.read()
    try:
        for body in records(data):
            ev = Event()
            ev.ParseFromString(body)
            out = {"wall_time": repr(ev.wall_time), "step": ev.step, "what": ev.WhichOneof("what")}
            if out["what"] == "file_version":
                out["file_version"] = ev.file_version
            elif out["what"] == "summary":
                out["values"] = [{"tag": v.tag, "kind": v.WhichOneof("value"), "simple_value": repr(v.simple_value)}
                                 for v in ev.summary.value]
            print(json.dumps(out))
    except Exception as e:  # noqa: BLE001 - any failure is a test failure
        print("read_tfevents: %s: %s" % (sys.argv[1], e), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
