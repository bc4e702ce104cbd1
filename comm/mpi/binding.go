//go:build mpi

package mpi

/*
#cgo pkg-config: ompi-c
#include <stdint.h>
#include <stdlib.h>
#include <mpi.h>

// Open MPI's handles (MPI_COMM_WORLD, MPI_FLOAT, MPI_IN_PLACE, …) are
// macros over the addresses of its globals, which cgo cannot evaluate. These
// wrappers name them on the C side; Go sees only plain ints, pointers and
// the opaque MPI_Comm.

enum { DSZ_F32 = 0, DSZ_U16 = 1, DSZ_I64 = 2 };

static MPI_Datatype dsz_type(int t) {
	switch (t) {
	case DSZ_F32: return MPI_FLOAT;
	case DSZ_U16: return MPI_UINT16_T;
	default: return MPI_INT64_T;
	}
}

static int dsz_thread_multiple(void) { return MPI_THREAD_MULTIPLE; }
static int dsz_thread_serialized(void) { return MPI_THREAD_SERIALIZED; }
static int dsz_thread_funneled(void) { return MPI_THREAD_FUNNELED; }

static int dsz_init(int *provided) {
	return MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, provided);
}

static int dsz_finalize(void) { return MPI_Finalize(); }

// dsz_dup_world is a private copy of MPI_COMM_WORLD whose errors are
// returned to the caller instead of aborting the job.
static int dsz_dup_world(MPI_Comm *out) {
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	int rc = MPI_Comm_dup(MPI_COMM_WORLD, out);
	if (rc != MPI_SUCCESS) return rc;
	return MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
}

// dsz_split is MPI_Comm_split with color < 0 as MPI_UNDEFINED; *member is
// 0 when this rank gets no communicator.
static int dsz_split(MPI_Comm c, int color, int key, MPI_Comm *out, int *member) {
	int rc = MPI_Comm_split(c, color < 0 ? MPI_UNDEFINED : color, key, out);
	if (rc != MPI_SUCCESS) return rc;
	*member = *out != MPI_COMM_NULL;
	if (!*member) return MPI_SUCCESS;
	return MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
}

static int dsz_rank_size(MPI_Comm c, int *rank, int *size) {
	int rc = MPI_Comm_rank(c, rank);
	if (rc != MPI_SUCCESS) return rc;
	return MPI_Comm_size(c, size);
}

// dsz_world_ranks writes the MPI_COMM_WORLD rank of each of c's n ranks.
static int dsz_world_ranks(MPI_Comm c, int n, int *out) {
	MPI_Group g, wg;
	int rc = MPI_Comm_group(c, &g);
	if (rc != MPI_SUCCESS) return rc;
	rc = MPI_Comm_group(MPI_COMM_WORLD, &wg);
	if (rc != MPI_SUCCESS) { MPI_Group_free(&g); return rc; }
	int *in = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
	for (int i = 0; i < n; i++) in[i] = i;
	rc = MPI_Group_translate_ranks(g, n, in, wg, out);
	free(in);
	MPI_Group_free(&g);
	MPI_Group_free(&wg);
	return rc;
}

static int dsz_alltoallv(const void *send, const int *scounts, const int *sdispls,
                         void *recv, const int *rcounts, const int *rdispls, int t, MPI_Comm c) {
	return MPI_Alltoallv(send, scounts, sdispls, dsz_type(t), recv, rcounts, rdispls, dsz_type(t), c);
}

// dsz_allgather: send == NULL means in place (MPI_IN_PLACE).
static int dsz_allgather(const void *send, void *recv, int count, int t, MPI_Comm c) {
	if (send == NULL) return MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, count, dsz_type(t), c);
	return MPI_Allgather(send, count, dsz_type(t), recv, count, dsz_type(t), c);
}

// dsz_allgatherv_inplace: every rank's part is already at its place in recv.
static int dsz_allgatherv_inplace(void *recv, const int *counts, const int *displs, int t, MPI_Comm c) {
	return MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, counts, displs, dsz_type(t), c);
}

static int dsz_bcast(void *buf, int count, int t, int root, MPI_Comm c) {
	return MPI_Bcast(buf, count, dsz_type(t), root, c);
}

static int dsz_barrier(MPI_Comm c) { return MPI_Barrier(c); }

static void dsz_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

// The control channel's point-to-point calls (control.go): byte messages,
// never blocking on a peer.

// dsz_take receives the next message of any source and tag on c, if one
// has arrived (*got = 0 otherwise): MPI_Improbe, then MPI_Mrecv into a
// malloc'd buffer of *n bytes, which the caller frees.
static int dsz_take(MPI_Comm c, int *got, int *source, int *tag, char **buf, int *n) {
	MPI_Message m;
	MPI_Status st;
	*got = 0;
	int rc = MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, c, got, &m, &st);
	if (rc != MPI_SUCCESS || !*got) return rc;
	rc = MPI_Get_count(&st, MPI_BYTE, n);
	if (rc != MPI_SUCCESS) return rc;
	*buf = malloc((size_t)(*n > 0 ? *n : 1));
	*source = st.MPI_SOURCE;
	*tag = st.MPI_TAG;
	return MPI_Mrecv(*buf, *n, MPI_BYTE, &m, MPI_STATUS_IGNORE);
}

static int dsz_isend_bytes(const void *buf, int n, int dest, int tag, MPI_Comm c, MPI_Request *req) {
	return MPI_Isend(buf, n, MPI_BYTE, dest, tag, c, req);
}

static int dsz_test(MPI_Request *req, int *done) {
	return MPI_Test(req, done, MPI_STATUS_IGNORE);
}

static void dsz_error_string(int code, char *buf, int cap) {
	char s[MPI_MAX_ERROR_STRING];
	int n = 0;
	if (MPI_Error_string(code, s, &n) != MPI_SUCCESS) n = 0;
	if (n >= cap) n = cap - 1;
	for (int i = 0; i < n; i++) buf[i] = s[i];
	buf[n] = 0;
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/dszero/dszero/device"
)

// handle is an MPI communicator (MPI_Comm).
type handle = C.MPI_Comm

// cint is C's int: MPI's counts and displacements.
type cint = C.int

// mpiType is the code of an element type in the C wrappers.
type mpiType = C.int

const (
	typeF32 mpiType = C.DSZ_F32
	typeU16 mpiType = C.DSZ_U16
	typeI64 mpiType = C.DSZ_I64
)

// typeOf is the MPI type that carries a dtype's elements. No reduction is
// ever done by MPI, so 16-bit data travels as MPI_UINT16_T.
func typeOf(dt device.DType) mpiType {
	if dt == device.F32 {
		return typeF32
	}
	return typeU16
}

// mpiError is an error code an MPI call returned, with MPI's message.
type mpiError struct {
	call string
	code int
}

func (e *mpiError) Error() string {
	var buf [512]C.char
	C.dsz_error_string(C.int(e.code), &buf[0], C.int(len(buf)))
	return fmt.Sprintf("%s: %s (MPI error %d)", e.call, C.GoString(&buf[0]), e.code)
}

func check(call string, rc C.int) error {
	if rc == C.MPI_SUCCESS {
		return nil
	}
	return &mpiError{call: call, code: int(rc)}
}

// threadLevelName names an MPI thread support level.
func threadLevelName(level int) string {
	switch C.int(level) {
	case C.dsz_thread_multiple():
		return "MPI_THREAD_MULTIPLE"
	case C.dsz_thread_serialized():
		return "MPI_THREAD_SERIALIZED"
	case C.dsz_thread_funneled():
		return "MPI_THREAD_FUNNELED"
	}
	return fmt.Sprintf("MPI_THREAD_SINGLE (%d)", level)
}

// mpiInit is MPI_Init_thread asking for MPI_THREAD_MULTIPLE; it returns the
// level provided and whether it is MPI_THREAD_MULTIPLE.
func mpiInit() (provided int, multiple bool, err error) {
	var p C.int
	if err := check("MPI_Init_thread", C.dsz_init(&p)); err != nil {
		return 0, false, err
	}
	return int(p), p == C.dsz_thread_multiple(), nil
}

func mpiFinalize() error { return check("MPI_Finalize", C.dsz_finalize()) }

// mpiAbort asks mpirun to kill every process of the job; it does not return
// in practice.
func mpiAbort(code int) { C.dsz_abort(C.int(code)) }

func dupWorld() (handle, error) {
	var h handle
	err := check("MPI_Comm_dup(MPI_COMM_WORLD)", C.dsz_dup_world(&h))
	return h, err
}

// split is MPI_Comm_split; ok is false for a rank that passed a negative
// color.
func split(h handle, color, key int) (sub handle, ok bool, err error) {
	var member C.int
	if err := check("MPI_Comm_split", C.dsz_split(h, C.int(color), C.int(key), &sub, &member)); err != nil {
		return sub, false, err
	}
	return sub, member != 0, nil
}

// describe is this rank's place in h and the world ranks of h's members.
func describe(h handle) (rank int, worldRanks []int, err error) {
	var r, n C.int
	if err := check("MPI_Comm_rank", C.dsz_rank_size(h, &r, &n)); err != nil {
		return 0, nil, err
	}
	ws := make([]cint, n)
	if err := check("MPI_Group_translate_ranks", C.dsz_world_ranks(h, n, unsafe.SliceData(ws))); err != nil {
		return 0, nil, err
	}
	worldRanks = make([]int, n)
	for i, w := range ws {
		worldRanks[i] = int(w)
	}
	return int(r), worldRanks, nil
}

// The collectives below are the blocking MPI calls, one each. Every count
// and displacement is a C int, in elements; the callers keep them within
// maxCount (see segment in collectives.go).

func alltoallv(h handle, send unsafe.Pointer, scounts, sdispls []cint, recv unsafe.Pointer, rcounts, rdispls []cint, t mpiType) error {
	return check("MPI_Alltoallv", C.dsz_alltoallv(send, &scounts[0], &sdispls[0], recv, &rcounts[0], &rdispls[0], t, h))
}

// allgather gathers count elements of send from every rank into recv; a
// nil send means in place (each rank's part already in recv).
func allgather(h handle, send, recv unsafe.Pointer, count int, t mpiType) error {
	return check("MPI_Allgather", C.dsz_allgather(send, recv, C.int(count), t, h))
}

func allgathervInPlace(h handle, recv unsafe.Pointer, counts, displs []cint, t mpiType) error {
	return check("MPI_Allgatherv", C.dsz_allgatherv_inplace(recv, &counts[0], &displs[0], t, h))
}

func bcast(h handle, buf unsafe.Pointer, count int, t mpiType, root int) error {
	return check("MPI_Bcast", C.dsz_bcast(buf, C.int(count), t, C.int(root), h))
}

func barrier(h handle) error { return check("MPI_Barrier", C.dsz_barrier(h)) }

// request is an MPI point-to-point request in flight (MPI_Request).
type request = C.MPI_Request

// take receives the next control message on h, if one has arrived.
func take(h handle) (msg []byte, source, tag int, ok bool, err error) {
	var got, src, tg, n C.int
	var buf *C.char
	if err := check("MPI_Improbe/MPI_Mrecv", C.dsz_take(h, &got, &src, &tg, &buf, &n)); err != nil || got == 0 {
		if buf != nil {
			C.free(unsafe.Pointer(buf))
		}
		return nil, 0, 0, false, err
	}
	msg = C.GoBytes(unsafe.Pointer(buf), n)
	C.free(unsafe.Pointer(buf))
	return msg, int(src), int(tg), true, nil
}

// sendBytes starts sending msg to dest on h without waiting for dest: the
// bytes are copied to C memory, which the returned free releases once
// testSend says the send is done.
func sendBytes(h handle, msg []byte, dest, tag int) (req request, free func(), err error) {
	buf := C.CBytes(msg)
	free = func() { C.free(buf) }
	if err := check("MPI_Isend", C.dsz_isend_bytes(buf, C.int(len(msg)), C.int(dest), C.int(tag), h, &req)); err != nil {
		free()
		return req, nil, err
	}
	return req, free, nil
}

// testSend reports whether a send has completed (MPI_Test).
func testSend(req *request) (bool, error) {
	var done C.int
	err := check("MPI_Test", C.dsz_test(req, &done))
	return done != 0, err
}

// cints is a reusable []cint of length n.
func cints(s *[]cint, n int) []cint {
	if cap(*s) < n {
		*s = make([]cint, n)
	}
	return (*s)[:n]
}
