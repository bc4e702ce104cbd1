// Package tfevents writes TensorBoard event files: the
// events.out.tfevents.* files that torch.utils.tensorboard.SummaryWriter
// writes and that TensorBoard, tensorboard's EventAccumulator and
// tf.compat.v1.train.summary_iterator read.
//
// # The file
//
// An event file is a sequence of TFRecords. Each record frames one
// serialized protocol buffer:
//
//	uint64 length            little-endian, bytes of data
//	uint32 masked_crc32c(length bytes)
//	byte   data[length]      one serialized tensorboard.Event
//	uint32 masked_crc32c(data)
//
// CRC-32C is the Castagnoli CRC (hash/crc32's Castagnoli table). TensorFlow
// stores it "masked" so that a CRC of data that itself holds CRCs is not
// degenerate: masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8, in uint32.
//
// # The messages
//
// The messages are tensorboard.Event and tensorboard.Summary from
// tensorboard/compat/proto/event.proto and summary.proto (proto3). Only the
// fields a scalar curve needs are written:
//
//	Event   { double wall_time = 1; int64 step = 2;
//	          oneof what { string file_version = 3; Summary summary = 5; ... } }
//	Summary { repeated Value value = 1; }
//	Value   { string tag = 1; oneof value { float simple_value = 2; ... } }
//
// As PyTorch's EventFileWriter does, the first record is
// Event{wall_time: now, file_version: "brain.Event:2"}; every scalar is then
// its own Event{wall_time, step, summary{value{tag, simple_value}}} — one
// add_scalar call, one record. simple_value is a float32: the float64 the
// caller passes is rounded to nearest, as protobuf does when Python assigns a
// float to a float field. Because file_version, summary and simple_value sit
// in oneofs they are written even when empty or zero; step and wall_time are
// plain proto3 scalars and, like Python's serializer, are left out when zero
// (a reader sees 0 either way).
//
// The bytes are built with google.golang.org/protobuf/encoding/protowire in
// field-number order, the order protobuf's own serializers use, so a file is
// byte-for-byte what Python protobuf produces for the same events (the golden
// test checks this against bytes written by python3-protobuf from the real
// event.proto schema).
//
// # The name
//
// EventFileWriter names the file
//
//	events.out.tfevents.<%010d unix seconds>.<hostname>.<pid>.<n>
//
// where n counts the writers opened by the process (0 for the first).
// Create opens the name exclusively and, if another writer of this process
// got there in the same second, takes the next n.
//
// # Durability
//
// Each AddScalars call is one write(2) of whole records, the equivalent of
// SummaryWriter.flush() after every batch, which is what DeepSpeed does.
// Close fsyncs. A crash can leave a torn last record; TensorBoard stops
// reading at it and keeps everything before it.
package tfevents
