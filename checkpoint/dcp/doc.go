// Package dcp reads and writes torch.distributed.checkpoint's FileSystem
// format — the directories dcp.save writes, and the ones Accelerate's FSDP
// SHARDED_STATE_DICT checkpoints are made of (pytorch_model_fsdp_0/,
// optimizer_0/) — without Python, and without running code from a file.
//
// Read for it (PyTorch's main branch as stored by the source index, whose
// filesystem.py already has SerializationFormat and CURRENT_DCP_VERSION,
// i.e. torch ≥ 2.6, and the releases before it back to 2.4 where they
// differ): torch/distributed/checkpoint/filesystem.py (_FileSystemWriter,
// _write_item, _write_files_from_queue, FileSystemReader.read_data),
// metadata.py, default_planner.py (create_default_global_save_plan,
// DefaultLoadPlanner), planner_helpers.py (_create_write_items,
// create_read_items_for_chunk_list), _nested_dict.py and _traverse.py
// (flatten_state_dict; traverse_state_dict and its _v_2_3 twin),
// torch/distributed/fsdp/_shard_utils.py (_create_chunk_sharded_tensor)
// and torch/serialization.py (_get_layout).
//
// # The directory
//
//	DIR/.metadata         the index: pickle.dump of a Metadata dataclass
//	DIR/__0_0.distcp      rank 0's blobs
//	DIR/__1_0.distcp      rank 1's blobs ...
//
// Every rank writes one file, "__{rank}_{i}.distcp" with i = 0 (one file
// per rank and one writer thread, FileSystemWriter's defaults; more
// threads give i = 1, 2, ...; the reader takes any name .metadata gives).
// A file is a concatenation of blobs, each a complete torch.save zip
// archive of one item, its entries under "archive/" (torch.save's name for
// a stream): first the rank's non-tensor values, then its tensor chunks.
// A tensor blob holds the chunk as a tensor of the chunk's shape over a
// storage of exactly its elements (the writer clones larger views); a
// value blob holds the value (a float, an int, a list of names...). The
// coordinator (rank 0) writes .metadata last, to .metadata.tmp and a
// rename, so a directory without one is a save that did not finish.
//
// # .metadata
//
// Metadata (torch.distributed.checkpoint.metadata) holds
//
//	state_dict_metadata  {fqn: TensorStorageMetadata | BytesStorageMetadata}
//	planner_data         {fqn: path tuple}: the flattening's paths
//	storage_data         {MetadataIndex(fqn, offset, index): _StorageInfo}
//	storage_meta         StorageMeta(checkpoint_id, save_id, load_id, modules)
//	version              "1.0.0" (torch ≥ 2.5; absent before)
//
// where TensorStorageMetadata is (properties, size, chunks): properties a
// TensorProperties, pickled as its __getstate__ tuple (dtype, layout,
// requires_grad, _MEM_FORMAT_ENCODING member, pin_memory), with the layout
// as torch.serialization._get_layout("torch.strided"); size a torch.Size;
// chunks a list of ChunkStorageMetadata(offsets, sizes), boxes that tile
// the tensor. storage_data maps each chunk, keyed by MetadataIndex(fqn,
// chunk offsets, chunk index), and each value, keyed by MetadataIndex(fqn)
// with no offset, to the _StorageInfo(relative_path, offset, length) of
// its blob. Dataclasses pickle as NEWOBJ of the class and a BUILD of
// their attribute dict; BytesStorageMetadata, having none, has no BUILD.
//
// The pickle is read through ptfile's allow-listed machine
// (ptfile.Unpickle) with exactly the classes above allowed
// (MetadataClasses), kept as data; nothing in the file runs. Writing
// pickles the same objects (ptfile.Pickle, protocol 2; torch writes
// Python's default, protocol 4 — both unpickle to the same objects).
// dszero records checkpoint_id as a string where torch records a
// pathlib.Path: the field is typed str | PathLike, and nothing reads it.
//
// # Keys: flattening
//
// DefaultSavePlanner flattens the nested state dict it is given into
// dotted keys (Flatten: every dict descended, a list descended only when
// it holds a dict or a tensor) and records each key's path in
// planner_data. Accelerate saves {"model": model.state_dict()}, so a
// parameter "fc1.weight" is "model.fc1.weight"; and {"optimizer":
// optim_state_dict}, so Adam's first moment of it is
// "optimizer.state.fc1.weight.exp_avg" and the first group's learning
// rate "optimizer.param_groups.0.lr". Loading with DefaultLoadPlanner
// flattens the target state dict the same way and matches keys; the paths
// rebuild the nesting for a load with no target (Checkpoint.StateDict,
// torch's dcp_to_torch_save).
//
// # Chunks and resharding
//
// A chunk is any box of a tensor. FSDP shards every parameter (and its
// optimizer state) on dim 0 the way torch.chunk does (RowChunk): FSDP2's
// DTensors with Shard(0) placements and FSDP1's SHARDED_STATE_DICT
// ShardedTensors (_create_chunk_sharded_tensor) both give rank r the rows
// from r·ceil(n/world); a rank with no rows saves no chunk. Tensors that
// are not sharded (the optimizer's 0-dimensional step) are saved whole by
// one rank. A ZeRO partition, which may start and end inside a row, is
// saved as the boxes its flat range splits into (FlatBoxes). A reader asks
// for any box (ReadBox) and gets it from whichever chunks overlap it, so a
// checkpoint saved on 4 ranks loads on 3, 8 or 1 (ReadRows, ReadFlat), as
// create_read_items_for_chunk_list reshards.
//
// # Checks
//
// Open checks what torch's _validate_global_plan checks at save time —
// every chunk inside its tensor, none overlapping, their volumes adding up
// to the tensor's — and that each chunk and value has a storage_data
// entry whose bytes lie inside a file of the directory (no path leaves
// it). Each blob read is checked to be a torch.save archive holding a
// tensor of the chunk's dtype and shape, its entries' CRC-32s verified
// (ptfile). Errors name the directory, the key and the file.
//
// # Not supported
//
// The SAFETENSORS serialization_format (a newer FileSystemWriter option: tensors
// stored raw in a safetensors file per rank) and stream-transform
// extensions (_extensions, e.g. zstd compression; transform_descriptors in
// storage_data) are refused with what to change. Dtypes ptfile does not
// know (complex, float8) are refused by the allow-list.
package dcp
