// Package ptfile reads and writes PyTorch .pt checkpoints — the files
// torch.save writes and DeepSpeed's save_checkpoint is made of — without
// Python, and without ever running code from a file.
//
// # The format
//
// A .pt file (torch ≥ 1.6) is an uncompressed zip archive whose entries all
// sit in one directory, named after the file (torch strips the extension:
// ArchiveName):
//
//	mp_rank_00_model_states/data.pkl    the value tree, as a pickle program
//	mp_rank_00_model_states/byteorder   "little" (torch 2.x; 1.13 and older omit it)
//	mp_rank_00_model_states/data/0      storage "0": raw little-endian elements
//	mp_rank_00_model_states/data/1      ...
//	mp_rank_00_model_states/version     "3\n", the archive format version
//
// Every payload starts at a multiple of 64 bytes (the local header is padded
// with an extra field whose id is "FB"), so a reader may map storages in
// place.
//
// data.pkl is a program for pickle's stack machine (protocol 2 by default):
// opcodes push ints, floats, strings, empty dicts and lists, fill them
// (SETITEMS, APPENDS), name globals (GLOBAL module name) and call them
// (REDUCE), create objects (NEWOBJ) and set their state (BUILD); BINPUT and
// BINGET memoize and reuse values. A tensor is a call
//
//	torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride,
//	                                requires_grad, backward_hooks=OrderedDict())
//
// whose storage argument is a persistent id (BINPERSID), the tuple
//
//	('storage', torch.BFloat16Storage, '0', 'cpu', 5768)
//
// naming the storage class (hence the dtype), the archive key (data/0), the
// device it was saved from and the element count. A tensor is a strided view
// of its storage: element (i, j) is storage element offset + i*stride[0] +
// j*stride[1]. Views of one storage name the same key, and torch.load gives
// them one storage again. DeepSpeed relies on this: its stage 0–2 model
// states hold every parameter as a view into one flat 16-bit buffer (in the
// reference MLP: fc1.weight at offset 0 with size (64, 16), fc1.bias at 1024,
// fc2.weight at 1088, ... of one 5768-element storage), and this package keeps
// that sharing in both directions (Tensor.Storage is a shared *Storage).
//
// Around tensors a checkpoint holds plain data — dicts, lists, tuples, ints,
// floats, strings, None, bools — and a few classes: collections.OrderedDict
// (state dicts; BUILD gives them a _metadata attribute with each module's
// version, kept in Dict.Attrs), torch.Size (REDUCE of a tuple), set (REDUCE
// of a list), and in DeepSpeed files three classes of its own, all found by
// reading every .pt of the DeepSpeed 0.14.5 reference runs (stages 0–3, fp32
// and bf16, offload; 100 files):
//
//	deepspeed.runtime.fp16.loss_scaler.LossScaler    NEWOBJ + BUILD {cur_scale, dynamic}
//	deepspeed.runtime.zero.config.ZeroStageEnum      getattr(ZeroStageEnum, 'gradients'), Python ≥ 3.11's enum pickling
//	deepspeed.utils.tensor_fragment.fragment_address NEWOBJ + BUILD {numel, start} (a dataclass)
//
// plus the globals torch._utils._rebuild_tensor_v2, collections.OrderedDict,
// torch.FloatStorage, torch.BFloat16Storage, torch.Size, __builtin__.set and
// __builtin__.getattr. No file has a tuple at data level, a bytes value, a
// torch.device or an argparse.Namespace.
//
// # Reading safely
//
// pickle.load runs whatever a file names (GLOBAL os system, REDUCE). Like
// torch.load(weights_only=True), this package's reader is a pickle machine
// of its own that resolves GLOBAL through an allow-list (Options) and
// models every allowed global instead of calling anything: rebuild functions
// become *Tensor, OrderedDict a *Dict, and an allow-listed class (DeepSpeed's,
// or Options.Classes) an opaque *Object recording how it was made (NEWOBJ,
// REDUCE or getattr) and its BUILD state. An unknown class is an error naming
// the class, the file and the option that would accept it.
//
// The machine is ours, not a library's, for these reasons (measured on
// github.com/nlpodyssey/gopickle v0.2.0): gopickle panics on malformed input
// (an odd SETITEMS: index out of range; a huge BINUNICODE8: makeslice),
// allocates untrusted lengths before reading, accepts unknown classes as
// generic objects unless FindClass refuses them and resolves
// OrderedDict/object/copy_reg before FindClass is asked, and keeps duplicate
// dict keys twice. github.com/kisielk/og-rek v1.3.0 never executes anything
// but decodes dicts into unordered Go maps, losing state-dict order. The
// machine here is torch's own _weights_only_unpickler.py design (a fixed
// opcode set, each checked) plus protocol 4's framing and short forms, in
// about 850 lines (unpickle.go, rebuild.go) with no panics: every read is
// bounds-checked against data.pkl, every pop against the current MARK, and
// the result is limited in depth (1000), in the values it builds and
// expands to (Options.MaxValues, so shared references cannot explode) and
// may not contain itself. data.pkl itself is limited in size
// (Options.MaxPickleBytes), checked before it is inflated.
//
// The archive is checked as it is read: a missing or duplicate entry, a
// truncated file, a CRC-32 mismatch (ErrChecksum), a storage entry whose
// size is not the pickle's numel × element size, and a view reaching past
// its storage are all errors naming the file and the entry (*Error). Open
// reads the pickle and checks the directory; storage bytes are read one
// entry at a time by File.Load, or streamed a piece at a time by
// File.ReadAt, whose pieces are checked against the entry's CRC-32 as they
// are read (entry.go), so a reader can bound its memory to what it uses.
// A compressed entry may declare any size: Storage.NBytes says it before
// Load allocates it. float16 and bfloat16 stay as their bits
// (Storage.Data, Tensor.Uint16s); Tensor.Float32s widens on request.
//
// # Writing
//
// Write pickles with protocol 2 as torch.save does — GLOBALs and strings
// memoized, dicts and lists filled in batches of 1000, tensors as
// _rebuild_tensor_v2 (nn.Parameters wrapped in _rebuild_parameter), storages
// numbered in order of first reference, shared storages written once —
// then lays out the zip with 64-byte aligned payloads, to path+".tmp",
// fsyncs, renames over path and fsyncs the directory. A storage's bytes
// come from its Data or, unloaded, from a Source that yields them a piece
// at a time (source.go: a []float32 in place, rounded to 16 bits on the
// fly, zero-padded), so a checkpoint is written from the buffers that hold
// it; WriteFile writes through one double-buffered I/O buffer, with
// O_DIRECT where the filesystem takes it, and returns the sha256 it
// computed on the way (writefile.go). File.Stream and Tensor.ReadFloat32
// read tensors back into a caller's buffers without loading the file
// (stream.go). The files load in
// real PyTorch with the same dtypes, shapes, strides, shared storages,
// OrderedDicts and DeepSpeed objects (the tests check this when python3 with
// torch is installed), and reading them back gives the same values.
//
// # Not supported
//
// The legacy (torch < 1.6) non-zip format, big-endian archives, TorchScript
// archives, complex, quantized and sparse tensors, tensor subclasses, and
// frozenset are errors. An entry over 4 GiB gets zip64 sizes in the central
// directory only (the local header says 0xFFFFFFFF), which is what torch's
// and Go's readers use.
package ptfile
